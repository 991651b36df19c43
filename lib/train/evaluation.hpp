#pragma once
// Using a trained model: test-set evaluation with per-class accuracy and the confusion matrix
// (`mnist-train eval`), and class probabilities for images (`mnist-train predict`).

#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"

namespace mnist {

// Class probabilities of every image of `images` (labels ignored): [count][classes], in the order
// of the set. Runs the network in evaluation mode on `backend` in batches of `batch`.
std::vector<std::vector<float>> predict_probabilities(const Model& model, Backend& backend,
                                                      const std::vector<float>& params,
                                                      const std::vector<float>& state,
                                                      const ImageSet& images, int batch = 1000);

struct EvaluationReport {
  int64_t samples = 0;
  double loss = 0, accuracy = 0;
  std::vector<std::vector<int64_t>> confusion;  // [true class][predicted class]
  std::vector<double> class_accuracy;           // correct / samples of that class (NaN if none)
};

EvaluationReport evaluate_model(const Model& model, Backend& backend,
                                const std::vector<float>& params, const std::vector<float>& state,
                                const ImageSet& test, int batch = 1000);

std::string format_report(const EvaluationReport& r);

}  // namespace mnist
