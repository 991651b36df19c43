#include "train/evaluation.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "train/run_memory.hpp"
#include "train/worker.hpp"

namespace mnist {

namespace {

// `labelled`: the set's labels are real and checked against the model's classes as training checks
// them (evaluation); otherwise they are ignored (prediction inputs may have none).
std::vector<std::vector<float>> probabilities(const Experiment& experiment, const Model& model,
                                              std::unique_ptr<Backend> backend,
                                              const CheckpointState& weights,
                                              const ImageSet& images, int batch, bool labelled) {
  check_images_fit_model(images, model.input().c, model.input().h, model.input().w);
  batch = std::max(1, std::min(batch, std::max(images.count, 1)));
  // The replica is sized for one evaluation batch: checked before it is allocated, as training
  // checks its own (the CPU's replica lives in host memory).
  const std::vector<MemoryTerm> terms = replica_memory(model, batch, "train.eval_batch");
  if (backend->kind() == DeviceKind::cpu)
    check_host_memory(terms, 1, available_host_bytes(), "evaluation");
  auto inputs = std::make_shared<RunInputs>();
  inputs->experiment = experiment;
  inputs->experiment.train.eval_batch = batch;
  inputs->model = model;
  inputs->plan.slice_begin = {0, 0};  // no training slice: this worker only evaluates
  auto data = std::make_shared<Dataset>();
  data->test = images;
  if (!labelled) data->test.labels.assign(images.count, 0);
  data->train.rows = images.rows;
  data->train.cols = images.cols;
  inputs->data = std::move(data);
  Worker worker(std::move(inputs), std::move(backend), 0, 0);
  worker.restore(weights);

  const int classes = model.classes();
  std::vector<std::vector<float>> out;
  out.reserve(images.count);
  std::vector<float> logits(static_cast<std::size_t>(batch) * classes);
  for (int begin = 0; begin < images.count; begin += batch) {
    const int n = std::min(batch, images.count - begin);
    const float* d_logits = worker.test_logits(begin, n);
    worker.backend().copy_to_host(logits.data(), d_logits,
                                  static_cast<std::size_t>(n) * classes * sizeof(float));
    for (int i = 0; i < n; ++i) {
      const float* row = logits.data() + static_cast<std::size_t>(i) * classes;
      const float top = *std::max_element(row, row + classes);
      std::vector<float> p(classes);
      double sum = 0;
      for (int c = 0; c < classes; ++c) sum += p[c] = std::exp(row[c] - top);
      for (float& v : p) v = static_cast<float>(v / sum);
      out.push_back(std::move(p));
    }
  }
  return out;
}

}  // namespace

std::vector<std::vector<float>> predict_probabilities(const Experiment& experiment,
                                                      const Model& model,
                                                      std::unique_ptr<Backend> backend,
                                                      const CheckpointState& weights,
                                                      const ImageSet& images, int batch) {
  return probabilities(experiment, model, std::move(backend), weights, images, batch, false);
}

EvaluationReport evaluate_model(const Experiment& experiment, const Model& model,
                                std::unique_ptr<Backend> backend, const CheckpointState& weights,
                                const ImageSet& test, int batch) {
  const auto probs =
      probabilities(experiment, model, std::move(backend), weights, test, batch, true);
  const int classes = model.classes();
  EvaluationReport r;
  r.samples = test.count;
  r.confusion.assign(classes, std::vector<int64_t>(classes, 0));
  double loss = 0;
  int64_t correct = 0;
  for (int i = 0; i < test.count; ++i) {
    const int label = test.labels[i];
    const auto& p = probs[i];
    // argmax with ties to the lowest class, as the training metric counts it
    const int predicted = static_cast<int>(std::max_element(p.begin(), p.end()) - p.begin());
    ++r.confusion[label][predicted];
    correct += predicted == label;
    loss -= std::log(std::max(static_cast<double>(p[label]), 1e-30));
  }
  r.loss = test.count ? loss / test.count : 0;
  r.accuracy = test.count ? static_cast<double>(correct) / test.count : 0;
  for (int c = 0; c < classes; ++c) {
    const int64_t total = std::accumulate(r.confusion[c].begin(), r.confusion[c].end(), int64_t{0});
    r.class_accuracy.push_back(total ? static_cast<double>(r.confusion[c][c]) / total
                                     : std::nan(""));
  }
  return r;
}

std::string format_report(const EvaluationReport& r) {
  const int classes = static_cast<int>(r.confusion.size());
  std::string out =
      fmt::format("test images {}: loss {:.4f}, accuracy {:.4f}\n", r.samples, r.loss, r.accuracy);
  out += "per class accuracy:";
  for (int c = 0; c < classes; ++c) out += fmt::format(" {}={:.3f}", c, r.class_accuracy[c]);
  out += "\nconfusion matrix (rows: true class, columns: predicted):\n      ";
  for (int c = 0; c < classes; ++c) out += fmt::format("{:>6}", c);
  out += "\n";
  for (int t = 0; t < classes; ++t) {
    out += fmt::format("{:>6}", t);
    for (int p = 0; p < classes; ++p) out += fmt::format("{:>6}", r.confusion[t][p]);
    out += "\n";
  }
  return out;
}

std::string report_json(const EvaluationReport& r) {
  // JSON has no NaN: a class without test images has accuracy null.
  auto number = [](double v) { return std::isfinite(v) ? fmt::format("{:.9g}", v) : "null"; };
  std::vector<std::string> accuracy, rows;
  for (double a : r.class_accuracy) accuracy.push_back(number(a));
  for (const auto& row : r.confusion) rows.push_back(fmt::format("[{}]", fmt::join(row, ",")));
  return fmt::format(
      "{{\"samples\":{},\"loss\":{},\"accuracy\":{},\"class_accuracy\":[{}],\"confusion\":[{}]}}",
      r.samples, number(r.loss), number(r.accuracy), fmt::join(accuracy, ","),
      fmt::join(rows, ","));
}

}  // namespace mnist
