#include "model/model.hpp"

#include <cmath>
#include <initializer_list>
#include <limits>
#include <numeric>

#include "core/error.hpp"
#include "core/rng.hpp"

namespace mnist {

std::string SampleShape::str() const {
  if (h == 1 && w == 1) return fmt::format("{}", c);
  return fmt::format("{}x{}x{}", c, h, w);
}

std::string LayerPlan::label() const {
  return fmt::format("{}:{}", index, to_string(spec.kind));
}

namespace {

[[noreturn]] void layer_error(const LayerSpec& spec, int index, const SampleShape& in,
                              const std::string& why) {
  MNIST_THROW(ConfigError, "{}{}: layer {} ({}) does not fit its input {}: {}",
              spec.yaml_line > 0 ? fmt::format("line {}: ", spec.yaml_line) : "",
              spec.yaml_path.empty() ? fmt::format("model.layers[{}]", index) : spec.yaml_path,
              index, to_string(spec.kind), in.str(), why);
}

// Output size and leading padding of one spatial dimension of a convolution, in 64 bits: every
// input is at most kMaxSizeKey (2^20), so no sum or product below can overflow.
// "same" follows TensorFlow: out = ceil(in / stride), the odd pixel of padding goes at the end.
void conv_dim(int64_t in, int64_t kernel, int64_t stride, const LayerSpec& spec, int64_t* out,
              int64_t* pad_before) {
  switch (spec.padding) {
    case PaddingMode::same: {
      *out = (in + stride - 1) / stride;
      const int64_t total = std::max<int64_t>((*out - 1) * stride + kernel - in, 0);
      *pad_before = total / 2;
      return;
    }
    case PaddingMode::valid:
      *out = in >= kernel ? (in - kernel) / stride + 1 : 0;
      *pad_before = 0;
      return;
    case PaddingMode::explicit_pixels: {
      const int64_t padded = in + 2 * int64_t{spec.padding_pixels};
      *pad_before = spec.padding_pixels;
      *out = padded >= kernel ? (padded - kernel) / stride + 1 : 0;
      return;
    }
  }
}

// a * b, or kSaturated when the product does not fit int64 (so a limit check refuses it).
constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();
// Forward FLOPs per sample: far beyond any trainable network, and small enough that a sum of two
// counts below it stays inside int64.
constexpr int64_t kMaxFlopsPerSample = int64_t{1} << 52;
int64_t mul_sat(int64_t a, int64_t b) {
  int64_t r = 0;
  return __builtin_mul_overflow(a, b, &r) ? kSaturated : r;
}
int64_t product(std::initializer_list<int64_t> factors) {
  int64_t r = 1;
  for (int64_t f : factors) r = mul_sat(r, f);
  return r;
}

// Refuses a count of one layer above `limit`, naming the config keys it comes from.
void check_count(const LayerSpec& spec, int index, const SampleShape& in, const char* what,
                 int64_t count, int64_t limit, const std::string& keys) {
  if (count <= limit) return;
  layer_error(spec, index, in,
              fmt::format("{} would be {}, more than the {} the tool supports (from {})", what,
                          count == kSaturated ? std::string("over 2^63") : std::to_string(count),
                          limit, keys));
}

int add_slot(std::vector<TensorSlot>& slots, std::string name, std::vector<int> shape,
             bool decayed) {
  TensorSlot slot;
  slot.name = std::move(name);
  slot.count =
      std::accumulate(shape.begin(), shape.end(), std::size_t{1},
                      [](std::size_t a, int b) { return a * static_cast<std::size_t>(b); });
  slot.shape = std::move(shape);
  slot.decayed = decayed;
  slots.push_back(std::move(slot));
  return static_cast<int>(slots.size()) - 1;
}

// Box-Muller on two 24-bit uniforms; the first is shifted into (0, 1] so the log is finite.
double normal_from(const Philox4x32& r) {
  const double u1 = (static_cast<double>(r.v[0] >> 8) + 1.0) / 16777216.0;
  const double u2 = static_cast<double>(r.v[1] >> 8) / 16777216.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

}  // namespace

Model Model::build(const ModelConfig& config) {
  Model m;
  m.input_ = SampleShape{config.input_c, config.input_h, config.input_w};
  m.classes_ = config.classes;
  SampleShape cur = m.input_;
  int64_t flops = 0;  // forward FLOPs per sample of the layers so far
  if (product({config.input_c, config.input_h, config.input_w}) > kMaxTensorValues)
    MNIST_THROW(ConfigError,
                "model.input: {}x{}x{} makes {} values per sample, more than the {} the tool "
                "supports",
                config.input_c, config.input_h, config.input_w,
                product({config.input_c, config.input_h, config.input_w}), kMaxTensorValues);
  for (std::size_t i = 0; i < config.layers.size(); ++i) {
    LayerPlan p;
    p.spec = config.layers[i];
    p.index = static_cast<int>(i);
    p.in = cur;
    const LayerSpec& s = p.spec;
    // Every per-sample activation holds at most kMaxTensorValues (checked below as each layer's
    // output is formed), so cur.size() cannot overflow.
    const std::string prefix = fmt::format("layers.{}.{}", i, to_string(s.kind));
    const int64_t in_size = static_cast<int64_t>(cur.size());
    switch (s.kind) {
      case LayerKind::conv2d: {
        if (cur.h == 1 && cur.w == 1 && cur.c > 1 && i > 0 &&
            config.layers[i - 1].kind == LayerKind::flatten)
          layer_error(s, p.index, cur, "conv2d needs a c x h x w input, not a flattened one");
        int64_t oh, ow, ph, pw;
        conv_dim(cur.h, s.kernel, s.stride, s, &oh, &ph);
        conv_dim(cur.w, s.kernel, s.stride, s, &ow, &pw);
        if (oh <= 0 || ow <= 0)
          layer_error(s, p.index, cur,
                      fmt::format("a {}x{} kernel with stride {} leaves no output", s.kernel,
                                  s.kernel, s.stride));
        const std::string key = s.yaml_path.empty() ? prefix : s.yaml_path + ".conv2d";
        // Only explicit padding makes an output larger than the input.
        const std::string grow = s.padding == PaddingMode::explicit_pixels
                                     ? key + ".padding and " + key + ".filters"
                                     : key + ".filters";
        check_count(s, p.index, cur, "its output height", oh, kMaxSizeKey, key + ".padding");
        check_count(s, p.index, cur, "its output width", ow, kMaxSizeKey, key + ".padding");
        check_count(s, p.index, cur, "the values per sample of its output",
                    product({s.filters, oh, ow}), kMaxTensorValues, grow);
        check_count(s, p.index, cur, "the values of its weight tensor",
                    product({s.filters, cur.c, s.kernel, s.kernel}), kMaxTensorValues,
                    key + ".kernel and " + key + ".filters");
        p.out = SampleShape{s.filters, static_cast<int>(oh), static_cast<int>(ow)};
        p.weight =
            add_slot(m.params_, prefix + ".weight", {s.filters, cur.c, s.kernel, s.kernel}, true);
        if (s.bias) p.bias = add_slot(m.params_, prefix + ".bias", {s.filters}, false);
        p.flops_per_sample = product({2, s.filters, cur.c, s.kernel, s.kernel, oh, ow});

        break;
      }
      case LayerKind::max_pool: {
        if (cur.h < s.pool_size || cur.w < s.pool_size)
          layer_error(s, p.index, cur,
                      fmt::format("pool size {} is larger than the input", s.pool_size));
        p.out = SampleShape{cur.c, (cur.h - s.pool_size) / s.stride + 1,
                            (cur.w - s.pool_size) / s.stride + 1};
        p.flops_per_sample =
            product({static_cast<int64_t>(p.out.size()), s.pool_size, s.pool_size});
        break;
      }
      case LayerKind::batch_norm: {
        p.out = cur;
        if (s.scale) p.gamma = add_slot(m.params_, prefix + ".gamma", {cur.c}, false);
        if (s.center) p.beta = add_slot(m.params_, prefix + ".beta", {cur.c}, false);
        p.running_mean = add_slot(m.state_, prefix + ".running_mean", {cur.c}, false);
        p.running_var = add_slot(m.state_, prefix + ".running_var", {cur.c}, false);
        p.flops_per_sample = 4 * in_size;
        break;
      }
      case LayerKind::relu:
      case LayerKind::dropout:
        p.out = cur;
        p.flops_per_sample = in_size;
        break;
      case LayerKind::flatten:
        p.out = SampleShape{static_cast<int>(cur.size()), 1, 1};  // <= kMaxTensorValues
        break;
      case LayerKind::dense: {
        if (cur.h != 1 || cur.w != 1)
          layer_error(s, p.index, cur, "dense needs a flat input; add `- flatten: {}` before it");
        const std::string key = s.yaml_path.empty() ? prefix : s.yaml_path + ".dense";
        check_count(s, p.index, cur, "the values of its weight tensor", product({s.units, cur.c}),
                    kMaxTensorValues, key + ".units and the size of its input");
        p.out = SampleShape{s.units, 1, 1};
        p.weight = add_slot(m.params_, prefix + ".weight", {s.units, cur.c}, true);
        if (s.bias) p.bias = add_slot(m.params_, prefix + ".bias", {s.units}, false);
        p.flops_per_sample = product({2, s.units, cur.c});
        break;
      }
    }
    // Each layer's count is checked against what is left of the limit, so the running total (and
    // Model::flops_per_sample's sum) never leaves int64.
    check_count(
        s, p.index, cur, "the network's forward FLOPs per sample",
        p.flops_per_sample > kMaxFlopsPerSample - flops ? kSaturated : flops + p.flops_per_sample,
        kMaxFlopsPerSample, p.label() + "'s sizes and those of the layers before it");
    flops += p.flops_per_sample;
    cur = p.out;
    m.layers_.push_back(std::move(p));
  }
  if (m.layers_.empty()) MNIST_THROW(ConfigError, "model.layers: the network has no layers");
  if (cur.size() != static_cast<std::size_t>(m.classes_)) {
    const LayerPlan& last = m.layers_.back();
    layer_error(last.spec, last.index, last.in,
                fmt::format("the last layer gives {} values per sample but model.classes is {}; "
                            "end with a dense layer of {} units",
                            cur.str(), m.classes_, m.classes_));
  }
  // Flat layout: decayed kernels first, then biases and batch-norm parameters, so weight decay is
  // one contiguous range [0, decayed_count) for the fused optimizer kernels.
  std::size_t offset = 0;
  for (int pass = 0; pass < 2; ++pass) {
    for (TensorSlot& slot : m.params_) {
      if (slot.decayed != (pass == 0)) continue;
      slot.offset = offset;
      offset += slot.count;
    }
    if (pass == 0) m.decayed_count_ = offset;
  }
  m.param_count_ = offset;
  // Each tensor is at most kMaxTensorValues, so the sums above (at most a few hundred terms) fit
  // 64 bits; the flat buffer itself is indexed like any tensor.
  if (m.param_count_ > static_cast<std::size_t>(kMaxTensorValues))
    MNIST_THROW(ConfigError,
                "model.layers: the network has {} trainable parameters, more than the {} one flat "
                "parameter buffer supports; make the largest layers smaller",
                m.param_count_, kMaxTensorValues);
  for (TensorSlot& slot : m.state_) {
    slot.offset = m.state_count_;
    m.state_count_ += slot.count;
  }
  return m;
}

int64_t Model::flops_per_sample() const {
  int64_t total = 0;
  // At most kMaxFlopsPerSample (Model::build checks the running total).
  for (const LayerPlan& p : layers_) total += p.flops_per_sample;
  return total;
}

std::vector<float> Model::initial_params(uint64_t seed) const {
  std::vector<float> values(param_count_, 0.0f);
  for (const LayerPlan& p : layers_) {
    if (p.gamma >= 0) {
      const TensorSlot& g = params_[p.gamma];
      std::fill(values.begin() + g.offset, values.begin() + g.offset + g.count, 1.0f);
    }
    if (p.weight < 0) continue;
    const TensorSlot& w = params_[p.weight];
    const int fan_out = w.shape[0];
    const int fan_in = static_cast<int>(w.count / w.shape[0]);
    const InitSpec& init = p.spec.init;
    // Keyed by (seed, layer index): a layer's weights do not change when another layer is edited.
    const RngKey key = make_rng_key(seed, 0x1000u + static_cast<uint32_t>(p.index));
    for (std::size_t e = 0; e < w.count; ++e) {
      double value = 0.0;
      switch (init.kind) {
        case InitKind::zeros:
          break;
        case InitKind::truncated_normal: {
          // TensorFlow's rule: draws beyond two standard deviations are redrawn.
          for (uint32_t attempt = 0;; ++attempt) {
            const double z =
                normal_from(philox4x32(static_cast<uint32_t>(e), attempt, 0, 0, key.k0, key.k1));
            if (std::abs(z) <= 2.0 || attempt == 1000) {
              value = init.mean + init.stddev * z;
              break;
            }
          }
          break;
        }
        case InitKind::he_normal:
          value = std::sqrt(2.0 / fan_in) *
                  normal_from(philox4x32(static_cast<uint32_t>(e), 0, 1, 0, key.k0, key.k1));
          break;
        case InitKind::glorot_uniform: {
          const double limit = std::sqrt(6.0 / (fan_in + fan_out));
          const Philox4x32 r = philox4x32(static_cast<uint32_t>(e), 0, 2, 0, key.k0, key.k1);
          value = limit * (2.0 * uniform01(r.v[0]) - 1.0);
          break;
        }
      }
      values[w.offset + e] = static_cast<float>(value);
    }
  }
  return values;
}

std::vector<float> Model::initial_state() const {
  std::vector<float> values(state_count_, 0.0f);
  for (const LayerPlan& p : layers_) {
    if (p.running_var < 0) continue;
    const TensorSlot& v = state_[p.running_var];
    std::fill(values.begin() + v.offset, values.begin() + v.offset + v.count, 1.0f);
  }
  return values;
}

std::string Model::summary() const {
  std::string out = fmt::format("{:<4} {:<12} {:<12} {:>10} {:>12}\n", "#", "layer", "output",
                                "params", "MFLOP/sample");
  out += fmt::format("{:<4} {:<12} {:<12} {:>10} {:>12}\n", "", "input", input_.str(), "", "");
  for (const LayerPlan& p : layers_) {
    std::size_t count = 0;
    for (int slot : {p.weight, p.bias, p.gamma, p.beta})
      if (slot >= 0) count += params_[slot].count;
    out += fmt::format("{:<4} {:<12} {:<12} {:>10} {:>12.3f}\n", p.index, to_string(p.spec.kind),
                       p.out.str(), count, p.flops_per_sample / 1e6);
  }
  out += fmt::format(
      "trainable parameters: {} ({} decayed kernels, {} biases/scales), "
      "batch-norm state: {}, forward {:.3f} MFLOP/sample",
      param_count_, decayed_count_, param_count_ - decayed_count_, state_count_,
      flops_per_sample() / 1e6);
  return out;
}

}  // namespace mnist
