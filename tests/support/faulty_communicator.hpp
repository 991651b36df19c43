#pragma once
// A transport that sums like the one it wraps until it is armed, then hands one replica a sum that
// is off by one in one element: what a link that corrupts one peer's copy does, after the set-up
// check of known sums has passed. Works on every backend: the wrong element goes through the
// backend's own copies (host memory for CPU workers, device memory for GPU ones).

#include <atomic>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "comm/communicator.hpp"

namespace mnist::testing {

class FaultyCommunicator final : public Communicator {
 public:
  // `faulty_rank`: the local worker whose sums go wrong once armed; `element`: which element.
  FaultyCommunicator(std::shared_ptr<Communicator> inner, int faulty_rank, std::size_t element = 0)
      : inner_(std::move(inner)), faulty_rank_(faulty_rank), element_(element) {}

  // From now on every sum handed to the faulty worker is wrong (thread-safe: a phase hook arms it).
  void arm() { armed_ = true; }

  std::string name() const override { return "faulty " + inner_->name(); }
  int local_size() const override { return inner_->local_size(); }
  int global_size() const override { return inner_->global_size(); }
  void all_reduce_sum(int local_rank, Backend& backend, float* data, std::size_t count) override {
    inner_->all_reduce_sum(local_rank, backend, data, count);
    if (!armed_ || local_rank != faulty_rank_ || count <= element_) return;
    float value = 0;
    backend.copy_to_host(&value, data + element_, sizeof(float));
    value += 1.0f;
    backend.copy_to_device(data + element_, &value, sizeof(float));
  }
  void abort() override { inner_->abort(); }

 private:
  std::shared_ptr<Communicator> inner_;
  int faulty_rank_;
  std::size_t element_;
  std::atomic<bool> armed_{false};
};

}  // namespace mnist::testing
