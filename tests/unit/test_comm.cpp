// The shared-memory all-reduce between CPU worker threads.
#include <catch2/catch.hpp>

#include <thread>

#include "backend/backend.hpp"
#include "comm/thread_communicator.hpp"

using namespace mnist;

TEST_CASE("thread all-reduce sums known values exactly on every worker", "[comm]") {
  for (int workers : {1, 2, 3, 4}) {
    for (std::size_t count :
         {std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{61881}}) {
      ThreadCommunicator comm(workers);
      std::vector<std::vector<float>> buffers(workers, std::vector<float>(count));
      std::vector<std::thread> threads;
      for (int k = 0; k < workers; ++k) {
        threads.emplace_back([&, k] {
          auto be = make_cpu_backend(BackendOptions{k, 1, Engine::native});
          // Worker k contributes k + 1 (+ a per-element offset so misplaced chunks show).
          for (std::size_t i = 0; i < count; ++i) buffers[k][i] = static_cast<float>(k + 1) + i % 5;
          for (int round = 0; round < 3; ++round) {
            comm.all_reduce_sum(k, *be, buffers[k].data(), count);
            if (round < 2)
              for (std::size_t i = 0; i < count; ++i)
                buffers[k][i] = static_cast<float>(k + 1) + i % 5;
          }
        });
      }
      for (auto& t : threads) t.join();
      const float base = workers * (workers + 1) / 2.0f;
      for (int k = 0; k < workers; ++k)
        for (std::size_t i = 0; i < count; ++i)
          REQUIRE(buffers[k][i] == base + static_cast<float>(workers * (i % 5)));
    }
  }
}

TEST_CASE("abort wakes a worker blocked in a collective", "[comm]") {
  ThreadCommunicator comm(2);
  std::vector<float> data(10, 1.0f);
  std::atomic<bool> threw{false};
  std::thread waiter([&] {
    auto be = make_cpu_backend(BackendOptions{});
    try {
      comm.all_reduce_sum(0, *be, data.data(), data.size());  // worker 1 never arrives
    } catch (const AbortedError&) {
      threw = true;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  comm.abort();
  waiter.join();
  CHECK(threw);
}
