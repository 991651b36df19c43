#pragma once
// Using a trained model: test-set evaluation with per-class accuracy and the confusion matrix
// (`mnist-train eval`), and class probabilities for images (`mnist-train predict`).

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "config/experiment.hpp"
#include "data/dataset.hpp"
#include "model/model.hpp"
#include "train/checkpoint.hpp"

namespace mnist {

// Both run the network in evaluation mode, in batches of `batch`, on a Worker (train/worker.hpp)
// set up on `backend` exactly as training sets one up (the images uploaded as a test set), with
// `weights` (parameters and state; moments not needed) loaded by the code a resume uses.
// `experiment`: the one the weights were trained with.

// Class probabilities of every image of `images` (labels ignored): [count][classes], in the order
// of the set.
std::vector<std::vector<float>> predict_probabilities(const Experiment& experiment,
                                                      const Model& model,
                                                      std::unique_ptr<Backend> backend,
                                                      const CheckpointState& weights,
                                                      const ImageSet& images, int batch = 1000);

struct EvaluationReport {
  int64_t samples = 0;
  double loss = 0, accuracy = 0;
  std::vector<std::vector<int64_t>> confusion;  // [true class][predicted class]
  std::vector<double> class_accuracy;           // correct / samples of that class (NaN if none)
};

EvaluationReport evaluate_model(const Experiment& experiment, const Model& model,
                                std::unique_ptr<Backend> backend, const CheckpointState& weights,
                                const ImageSet& test, int batch = 1000);

std::string format_report(const EvaluationReport& r);
// The report as one JSON object (one line, no newline): samples, loss, accuracy, class_accuracy
// (null for a class with no test image) and confusion ([true class][predicted class]).
std::string report_json(const EvaluationReport& r);

}  // namespace mnist
