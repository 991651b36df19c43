#include "sweep/results.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <sstream>

#include "core/atomic_file.hpp"
#include "core/error.hpp"
#include "core/input_file.hpp"
#include "core/json.hpp"

namespace mnist {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr uint64_t kMaxRecordBytes = uint64_t{1} << 20;

std::optional<double> number(const json::Value& object, const char* key,
                             const std::string& source) {
  const json::Value* v = object.find(key);
  if (v == nullptr || v->type == json::Type::null) return std::nullopt;
  if (v->type != json::Type::number)
    MNIST_THROW(DataError, "{}: \"{}\" is {}, expected a number", source, key,
                json::to_string(v->type));
  return std::stod(v->text);
}

double or_nan(const std::optional<double>& v) {
  return v ? *v : kNaN;
}

std::string exact(double v) {
  return std::isfinite(v) ? fmt::format("{:.9g}", v) : "";
}

std::string csv_cell(const std::string& text) {
  if (text.find_first_of(",\"\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string csv_line(const std::vector<std::string>& cells) {
  std::string line;
  for (std::size_t i = 0; i < cells.size(); ++i) line += (i ? "," : "") + csv_cell(cells[i]);
  return line + "\n";
}

struct Stats {
  int n = 0;
  double mean = kNaN, std = kNaN, min = kNaN, max = kNaN;
};

Stats stats(const std::vector<double>& values) {
  Stats s;
  std::vector<double> v;
  for (double x : values)
    if (std::isfinite(x)) v.push_back(x);
  s.n = static_cast<int>(v.size());
  if (v.empty()) return s;
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / s.n;
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  if (s.n > 1) {
    double sq = 0;
    for (double x : v) sq += (x - s.mean) * (x - s.mean);
    s.std = std::sqrt(sq / (s.n - 1));  // the sample standard deviation
  }
  return s;
}

std::string fixed(double v, int digits = 4) {
  return std::isfinite(v) ? fmt::format("{:.{}f}", v, digits) : "";
}

}  // namespace

const char* to_string(PointState s) {
  switch (s) {
    case PointState::done:
      return "done";
    case PointState::failed:
      return "failed";
    case PointState::stopped:
      return "stopped";
    case PointState::not_run:
      return "not run";
  }
  return "?";
}

std::string last_error_line(const std::string& log_text, const std::string& header_prefix) {
  std::istringstream in(log_text);
  std::string line, error, last;
  while (std::getline(in, line)) {
    if (!header_prefix.empty() && line.rfind(header_prefix, 0) == 0) {
      error.clear();
      last.clear();
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    last = line;
    if (line.rfind("mnist-train: ", 0) == 0) error = line.substr(13);
  }
  return error.empty() ? last : error;
}

void write_point_status(const std::string& path, int exit_code, const std::string& message,
                        double wall_seconds) {
  const std::string text =
      fmt::format("{{\"exit_code\":{},\"message\":{},\"wall_seconds\":{}}}\n", exit_code,
                  json::quote(message), exact(wall_seconds).empty() ? "0" : exact(wall_seconds));
  write_file_atomically(path, text.data(), text.size());
}

PointResult read_point_result(const std::string& run_dir, const std::string& status_path) {
  PointResult r;
  std::error_code ec;
  if (fs::exists(status_path, ec)) {
    const std::string text = read_regular_file(status_path, kMaxRecordBytes, "point status");
    const json::Value status = json::parse(text, status_path);
    const std::optional<double> code = number(status, "exit_code", status_path);
    r.exit_code = code ? static_cast<int>(*code) : -1;
    if (const json::Value* m = status.find("message"); m && m->type == json::Type::string)
      r.message = m->text;
    r.process_seconds = or_nan(number(status, "wall_seconds", status_path));
    // 3 and 75: stopped by a signal with a checkpoint written, resumed by the next run.
    r.state = r.exit_code == 0                        ? PointState::done
              : r.exit_code == 3 || r.exit_code == 75 ? PointState::stopped
                                                      : PointState::failed;
  }
  const std::string summary_path = (fs::path(run_dir) / "summary.json").string();
  if (!fs::exists(summary_path, ec)) {
    // Exit 0 without a summary (the folder was removed since): not a result.
    if (r.state == PointState::done) r.state = PointState::not_run;
    return r;
  }
  const std::string text = read_regular_file(summary_path, kMaxRecordBytes, "run summary");
  const json::Value s = json::parse(text, summary_path);
  r.state = PointState::done;
  r.exit_code = 0;
  r.message.clear();
  r.test_accuracy = or_nan(number(s, "test_accuracy", summary_path));
  r.test_loss = or_nan(number(s, "test_loss", summary_path));
  r.validation_accuracy = number(s, "validation_accuracy", summary_path);
  r.validation_loss = number(s, "validation_loss", summary_path);
  r.best_validation_accuracy = number(s, "best_validation_accuracy", summary_path);
  if (const auto best = number(s, "best_step", summary_path))
    r.best_step = static_cast<int64_t>(*best);
  r.steps = static_cast<int64_t>(number(s, "steps", summary_path).value_or(0));
  const double rate = or_nan(number(s, "samples_per_second", summary_path));
  const double batch = or_nan(number(s, "global_batch", summary_path));
  r.steps_per_second = batch > 0 ? rate / batch : kNaN;
  r.wall_seconds = or_nan(number(s, "wall_seconds", summary_path));
  return r;
}

SweepTable build_table(const std::vector<PlannedPoint>& points,
                       const std::vector<PointResult>& results) {
  MNIST_CHECK(points.size() == results.size(), "{} points, {} results", points.size(),
              results.size());
  SweepTable table;
  for (const PointResult& r : results)
    if (r.state == PointState::done && r.validation_accuracy) table.by_validation = true;
  table.title = table.by_validation
                    ? "ranked by mean validation accuracy (test accuracy beside it)"
                    : "ranked by mean test accuracy (the summaries carry no validation accuracy; "
                      "set data.validation_size to rank by a held-out split)";

  // The rows: points in order of their row, each row's seeds in order.
  std::map<int, std::vector<std::size_t>> rows;
  std::vector<uint64_t> seeds;
  bool has_seeds = false;
  for (std::size_t i = 0; i < points.size(); ++i) {
    rows[points[i].point.row].push_back(i);
    if (points[i].point.seed) {
      has_seeds = true;
      if (std::find(seeds.begin(), seeds.end(), *points[i].point.seed) == seeds.end())
        seeds.push_back(*points[i].point.seed);
    }
  }
  // Columns: rank, each setting's key, then the figures.
  std::vector<std::string> keys;
  for (const auto& [row, members] : rows)
    for (const SweepSetting& s : points[members.front()].point.settings)
      if (std::find(keys.begin(), keys.end(), s.key) == keys.end()) keys.push_back(s.key);
  table.header.push_back("rank");
  for (const std::string& k : keys) table.header.push_back(k);
  table.header.push_back("seeds");
  if (table.by_validation) {
    for (const char* h : {"val acc mean", "val acc std", "best val acc mean"})
      table.header.push_back(h);
  }
  for (const char* h :
       {"test acc mean", "test acc std", "test acc min", "test acc max", "test loss mean"})
    table.header.push_back(h);
  if (has_seeds)
    for (uint64_t s : seeds) {
      table.header.push_back(fmt::format("seed {} acc", s));
      table.header.push_back(fmt::format("seed {} loss", s));
    }
  for (const char* h : {"steps/s", "wall s", "status"}) table.header.push_back(h);

  struct Row {
    double score = kNaN;
    std::vector<std::string> rounded, full;
  };
  std::vector<Row> built;
  for (const auto& [row_index, members] : rows) {
    (void)row_index;
    Row row;
    const SweepPoint& p = points[members.front()].point;
    std::vector<std::string> settings;
    for (const std::string& k : keys) {
      std::string value;
      for (const SweepSetting& s : p.settings)
        if (s.key == k) value = s.value;
      settings.push_back(value);
    }
    std::vector<double> acc, loss, val, best_val, rate, wall;
    std::map<uint64_t, const PointResult*> by_seed;
    int done = 0;
    std::map<std::string, int> other;  // "exit 4", "stopped", "not run" -> count
    for (std::size_t i : members) {
      const PointResult& r = results[i];
      if (points[i].point.seed) by_seed[*points[i].point.seed] = &r;
      if (r.state == PointState::done) {
        ++done;
        acc.push_back(r.test_accuracy);
        loss.push_back(r.test_loss);
        val.push_back(or_nan(r.validation_accuracy));
        best_val.push_back(or_nan(r.best_validation_accuracy));
        rate.push_back(r.steps_per_second);
        // The point's own process as the sweep timed it (start-up and evaluation included), else
        // the run's training time.
        wall.push_back(std::isfinite(r.process_seconds) && r.process_seconds > 0 ? r.process_seconds
                                                                                 : r.wall_seconds);
        continue;
      }
      const std::string what = r.state == PointState::not_run
                                   ? "not run"
                                   : fmt::format("{} (exit {})", to_string(r.state), r.exit_code);
      ++other[what];
      table.failures.push_back(fmt::format("point {} ({}): {}{}", points[i].point.index,
                                           points[i].point.label(), what,
                                           r.message.empty() ? "" : ": " + r.message));
    }
    std::string status =
        done == static_cast<int>(members.size()) ? std::string("ok") : fmt::format("{} ok", done);
    for (const auto& [what, count] : other) status += fmt::format(", {} {}", count, what);
    const Stats a = stats(acc), l = stats(loss), v = stats(val), bv = stats(best_val),
                sp = stats(rate), w = stats(wall);
    row.score = table.by_validation ? v.mean : a.mean;
    auto add = [&](const std::string& rounded, const std::string& full) {
      row.rounded.push_back(rounded);
      row.full.push_back(full);
    };
    for (const std::string& s : settings) add(s, s);
    std::string seed_list;
    for (std::size_t i : members)
      if (points[i].point.seed)
        seed_list += (seed_list.empty() ? "" : " ") + std::to_string(*points[i].point.seed);
    add(seed_list.empty() ? "config" : seed_list, seed_list.empty() ? "config" : seed_list);
    if (table.by_validation) {
      add(fixed(v.mean), exact(v.mean));
      add(fixed(v.std), exact(v.std));
      add(fixed(bv.mean), exact(bv.mean));
    }
    add(fixed(a.mean), exact(a.mean));
    add(fixed(a.std), exact(a.std));
    add(fixed(a.min), exact(a.min));
    add(fixed(a.max), exact(a.max));
    add(fixed(l.mean), exact(l.mean));
    if (has_seeds)
      for (uint64_t s : seeds) {
        const auto it = by_seed.find(s);
        const PointResult* r = it == by_seed.end() ? nullptr : it->second;
        const bool ok = r != nullptr && r->state == PointState::done;
        const std::string failed = r == nullptr ? ""
                                   : r->state == PointState::not_run
                                       ? "-"
                                       : fmt::format("exit {}", r->exit_code);
        add(ok ? fixed(r->test_accuracy) : failed, ok ? exact(r->test_accuracy) : failed);
        add(ok ? fixed(r->test_loss) : "", ok ? exact(r->test_loss) : "");
      }
    add(fixed(sp.mean, 1), exact(sp.mean));
    add(fixed(w.mean, 1), exact(w.mean));
    add(status, status);
    built.push_back(std::move(row));
  }
  // Best first; rows without a score (nothing finished) last, in their order.
  std::stable_sort(built.begin(), built.end(), [](const Row& a, const Row& b) {
    if (std::isfinite(a.score) != std::isfinite(b.score)) return std::isfinite(a.score);
    return std::isfinite(a.score) && a.score > b.score;
  });
  for (std::size_t i = 0; i < built.size(); ++i) {
    const std::string rank = std::isfinite(built[i].score) ? std::to_string(i + 1) : "-";
    built[i].rounded.insert(built[i].rounded.begin(), rank);
    built[i].full.insert(built[i].full.begin(), rank);
    table.rows.push_back(built[i].rounded);
    table.exact.push_back(built[i].full);
  }
  if (!built.empty() && std::isfinite(built.front().score)) {
    std::string settings;
    for (std::size_t k = 0; k < keys.size(); ++k)
      settings += (k ? " " : "") + keys[k] + "=" + built.front().rounded[k + 1];
    table.best = fmt::format("{} {:.4f} ({})", table.by_validation ? "validation" : "test",
                             built.front().score, settings.empty() ? "the base config" : settings);
  }
  return table;
}

std::string table_markdown(const SweepTable& table) {
  std::string out = table.title + "\n\n";
  auto line = [](const std::vector<std::string>& cells) {
    std::string text = "|";
    for (const std::string& c : cells) {
      std::string escaped;
      for (char ch : c) escaped += ch == '|' ? std::string("\\|") : std::string(1, ch);
      text += " " + escaped + " |";
    }
    return text + "\n";
  };
  out += line(table.header);
  std::string rule = "|";
  for (std::size_t i = 0; i < table.header.size(); ++i) rule += "---|";
  out += rule + "\n";
  for (const auto& row : table.rows) out += line(row);
  if (!table.failures.empty()) {
    out += "\nPoints without a result:\n\n";
    for (const std::string& f : table.failures) out += "- " + f + "\n";
  }
  return out;
}

std::string table_csv(const SweepTable& table) {
  std::string out = csv_line(table.header);
  for (const auto& row : table.exact) out += csv_line(row);
  return out;
}

std::string points_csv(const std::vector<PlannedPoint>& points,
                       const std::vector<PointResult>& results, const std::string& sweep_dir) {
  std::vector<std::string> keys;
  for (const PlannedPoint& p : points)
    for (const SweepSetting& s : p.point.settings)
      if (std::find(keys.begin(), keys.end(), s.key) == keys.end()) keys.push_back(s.key);
  std::vector<std::string> header = {"point", "row"};
  header.insert(header.end(), keys.begin(), keys.end());
  for (const char* h :
       {"seed", "state", "exit_code", "test_accuracy", "test_loss", "validation_accuracy",
        "validation_loss", "best_validation_accuracy", "best_step", "steps", "steps_per_second",
        "wall_seconds", "process_seconds", "run_dir", "message"})
    header.push_back(h);
  std::string out = csv_line(header);
  for (std::size_t i = 0; i < points.size(); ++i) {
    const PlannedPoint& p = points[i];
    const PointResult& r = results[i];
    const bool done = r.state == PointState::done;
    std::vector<std::string> cells = {std::to_string(p.point.index), std::to_string(p.point.row)};
    for (const std::string& k : keys) {
      std::string value;
      for (const SweepSetting& s : p.point.settings)
        if (s.key == k) value = s.value;
      cells.push_back(value);
    }
    cells.push_back(p.point.seed ? std::to_string(*p.point.seed)
                                 : std::to_string(p.experiment.seed));
    cells.push_back(to_string(r.state));
    cells.push_back(r.exit_code >= 0 ? std::to_string(r.exit_code) : "");
    cells.push_back(done ? exact(r.test_accuracy) : "");
    cells.push_back(done ? exact(r.test_loss) : "");
    cells.push_back(done ? exact(or_nan(r.validation_accuracy)) : "");
    cells.push_back(done ? exact(or_nan(r.validation_loss)) : "");
    cells.push_back(done ? exact(or_nan(r.best_validation_accuracy)) : "");
    cells.push_back(r.best_step ? std::to_string(*r.best_step) : "");
    cells.push_back(done ? std::to_string(r.steps) : "");
    cells.push_back(done ? exact(r.steps_per_second) : "");
    cells.push_back(done ? exact(r.wall_seconds) : "");
    cells.push_back(r.exit_code >= 0 ? exact(r.process_seconds) : "");
    cells.push_back(p.run_dir(sweep_dir));
    cells.push_back(r.message);
    out += csv_line(cells);
  }
  return out;
}

}  // namespace mnist
