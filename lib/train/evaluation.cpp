#include "train/evaluation.hpp"

#include <cmath>
#include <numeric>

#include "core/error.hpp"
#include "model/replica.hpp"

namespace mnist {

std::vector<std::vector<float>> predict_probabilities(const Model& model, Backend& be,
                                                      const std::vector<float>& params,
                                                      const std::vector<float>& state,
                                                      const ImageSet& images, int batch) {
  MNIST_CHECK(params.size() == model.param_count() && state.size() == model.state_count(),
              "parameters ({}) or state ({}) do not fit the model ({}, {})", params.size(),
              state.size(), model.param_count(), model.state_count());
  if (images.rows != model.input().h || images.cols != model.input().w || model.input().c != 1)
    MNIST_THROW(DataError, "{}: images are {}x{} but the model takes {}", images.images_path,
                images.rows, images.cols, model.input().str());
  batch = std::max(1, std::min(batch, std::max(images.count, 1)));
  Replica replica(model, be, batch);
  be.copy_to_device(replica.params(), params.data(), params.size() * sizeof(float));
  be.copy_to_device(replica.state(), state.data(), state.size() * sizeof(float));
  const int pixels = images.pixels_per_image();
  DeviceBuffer<uint8_t> d_pixels(be, std::max<std::size_t>(images.pixels.size(), 1));
  DeviceBuffer<uint8_t> d_labels(be, std::max(images.count, 1));
  DeviceBuffer<int32_t> d_idx(be, batch);
  std::vector<uint8_t> zero_labels(std::max(images.count, 1), 0);  // labels do not matter here
  be.copy_to_device(d_pixels.data(), images.pixels.data(), images.pixels.size());
  be.copy_to_device(d_labels.data(), zero_labels.data(), zero_labels.size());
  const int classes = model.classes();
  std::vector<std::vector<float>> out;
  out.reserve(images.count);
  std::vector<int32_t> idx(batch);
  std::vector<float> logits(static_cast<std::size_t>(batch) * classes);
  PassContext ctx;
  ctx.training = false;
  for (int begin = 0; begin < images.count; begin += batch) {
    const int n = std::min(batch, images.count - begin);
    std::iota(idx.begin(), idx.begin() + n, begin);
    be.copy_to_device(d_idx.data(), idx.data(), n * sizeof(int32_t));
    be.gather_batch(d_pixels.data(), d_labels.data(), pixels, d_idx.data(), n, replica.input(),
                    replica.labels());
    ctx.n = n;
    const float* d_logits = replica.forward_logits(ctx);
    be.copy_to_host(logits.data(), d_logits, static_cast<std::size_t>(n) * classes * sizeof(float));
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

EvaluationReport evaluate_model(const Model& model, Backend& be, const std::vector<float>& params,
                                const std::vector<float>& state, const ImageSet& test, int batch) {
  const auto probs = predict_probabilities(model, be, params, state, test, batch);
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

}  // namespace mnist
