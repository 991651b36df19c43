// The documentation stays true to the code: every key the config reader accepts has a row in
// docs/configuration.md (and every key a row names is one the reader accepts), and every relative
// link of README.md and docs/*.md reaches a file, and a heading where it names one.
//
// The files are read from the working directory, the project root, where CTest runs the unit tests
// (tests/CMakeLists.txt) and scripts/test.sh runs the sanitized binaries.

#include <catch2/catch.hpp>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config/keys.hpp"
#include "support/idx_writer.hpp"

namespace fs = std::filesystem;

namespace {

// A markdown file's lines outside fenced code blocks (``` ... ```), each with its 1-based number.
struct Line {
  int number;
  std::string text;
};

std::vector<Line> prose_lines(const fs::path& file) {
  std::ifstream in(file);
  INFO("reading " << file.string() << " (the tests run from the project root)");
  REQUIRE(in.good());
  std::vector<Line> lines;
  std::string text;
  bool in_fence = false;
  for (int number = 1; std::getline(in, text); ++number) {
    const size_t first = text.find_first_not_of(' ');
    if (first != std::string::npos && text.compare(first, 3, "```") == 0) {
      in_fence = !in_fence;
      continue;
    }
    if (!in_fence) lines.push_back({number, text});
  }
  return lines;
}

// The cells of a table row "| a | b |" (a line starting with '|'), trimmed; empty for other lines.
std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> cells;
  if (line.empty() || line[0] != '|') return cells;
  std::string cell;
  bool in_code = false;  // a '|' inside `...` (`a` \| `b`) does not end a cell
  for (size_t i = 1; i < line.size(); ++i) {
    const char c = line[i];
    if (c == '`') in_code = !in_code;
    if (c == '|' && !in_code && line[i - 1] != '\\') {
      const size_t b = cell.find_first_not_of(' ');
      const size_t e = cell.find_last_not_of(' ');
      cells.push_back(b == std::string::npos ? "" : cell.substr(b, e - b + 1));
      cell.clear();
    } else {
      cell += c;
    }
  }
  return cells;
}

// The `...` spans of a text.
std::vector<std::string> code_spans(const std::string& text) {
  std::vector<std::string> spans;
  size_t open = text.find('`');
  while (open != std::string::npos) {
    const size_t close = text.find('`', open + 1);
    if (close == std::string::npos) break;
    spans.push_back(text.substr(open + 1, close - open - 1));
    open = text.find('`', close + 1);
  }
  return spans;
}

// The keys docs/configuration.md documents: the code spans in the first cell of each row of a key
// table (a table whose header's first cell is "key"), with the line of each.
std::map<std::string, int> documented_keys(const fs::path& file) {
  std::map<std::string, int> keys;
  bool in_key_table = false;
  for (const Line& line : prose_lines(file)) {
    const std::vector<std::string> cells = table_cells(line.text);
    if (cells.empty()) {
      in_key_table = false;
      continue;
    }
    if (!in_key_table) {
      in_key_table = cells[0] == "key";  // the header row; the next is its |---| line
      continue;
    }
    for (const std::string& span : code_spans(cells[0])) keys.emplace(span, line.number);
  }
  return keys;
}

// GitHub's anchor for a heading: lower case, spaces to '-', punctuation other than '-' and '_'
// dropped (code ticks and emphasis marks with it), other letters kept.
std::string heading_anchor(const std::string& heading) {
  std::string anchor;
  for (const char ch : heading) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (std::isalnum(c)) {
      anchor += static_cast<char>(std::tolower(c));
    } else if (c == ' ') {
      anchor += '-';
    } else if (c == '-' || c == '_' || c >= 0x80) {
      anchor += ch;
    }
  }
  return anchor;
}

// Every anchor a markdown file's headings make; a repeated heading's gets -1, -2, ... as on GitHub.
std::set<std::string> heading_anchors(const fs::path& file) {
  std::set<std::string> anchors;
  std::map<std::string, int> seen;
  for (const Line& line : prose_lines(file)) {
    if (line.text.empty() || line.text[0] != '#') continue;
    const size_t text = line.text.find_first_not_of('#');
    if (text == std::string::npos || line.text[text] != ' ') continue;
    const std::string anchor = heading_anchor(line.text.substr(text + 1));
    const int n = seen[anchor]++;
    anchors.insert(n == 0 ? anchor : anchor + "-" + std::to_string(n));
  }
  return anchors;
}

std::vector<fs::path> markdown_files() {
  std::vector<fs::path> files = {"README.md"};
  std::vector<fs::path> docs;
  for (const auto& entry : fs::directory_iterator("docs")) {
    if (entry.path().extension() == ".md") docs.push_back(entry.path());
  }
  std::sort(docs.begin(), docs.end());
  files.insert(files.end(), docs.begin(), docs.end());
  return files;
}

// What is wrong with each relative link of `file` ("" for none): a target that does not exist, or
// an anchor that no heading of the target makes.
std::vector<std::string> broken_links(const fs::path& file) {
  std::vector<std::string> broken;
  // [text](target) and ![alt](target), outside code spans; an optional "title" after the target.
  const std::regex link(R"(\]\(([^()\s]+)(?:\s+"[^"]*")?\))");
  for (const Line& line : prose_lines(file)) {
    std::string text;
    bool in_code = false;
    for (const char c : line.text) {
      if (c == '`') in_code = !in_code;
      if (!in_code && c != '`') text += c;
    }
    for (std::sregex_iterator it(text.begin(), text.end(), link), end; it != end; ++it) {
      const std::string target = (*it)[1];
      if (target.rfind("http://", 0) == 0 || target.rfind("https://", 0) == 0 ||
          target.rfind("mailto:", 0) == 0) {
        continue;
      }
      const std::string where = file.string() + ":" + std::to_string(line.number) + ": " + target;
      if (target[0] == '/') {
        broken.push_back(where + " (absolute: write it relative to the file)");
        continue;
      }
      const size_t hash = target.find('#');
      const std::string path = target.substr(0, hash);
      const fs::path resolved = path.empty() ? file : file.parent_path() / path;
      if (!fs::exists(resolved)) {
        broken.push_back(where + " (no such file)");
        continue;
      }
      if (hash == std::string::npos) continue;
      const std::string anchor = target.substr(hash + 1);
      if (resolved.extension() != ".md" || heading_anchors(resolved).count(anchor) == 0) {
        broken.push_back(where + " (no heading of " + resolved.string() + " makes #" + anchor +
                         ")");
      }
    }
  }
  return broken;
}

std::string lines_of(const std::vector<std::string>& items) {
  std::ostringstream out;
  for (const std::string& item : items) out << "\n  " << item;
  return out.str();
}

}  // namespace

TEST_CASE("every config key the reader accepts has a row in docs/configuration.md", "[docs]") {
  const std::vector<std::string> keys = mnist::config_keys();
  // The table is the reader's: a few keys of each kind must be in it.
  for (const char* key : {"seed", "data.files.train_images", "train.batch_per_device",
                          "model.layers[].conv2d.padding", "model.layers[].dense.init.type",
                          "model.layers[].conv2d.batchnorm.decay", "model.layers[].flatten"}) {
    CAPTURE(key);
    CHECK(std::count(keys.begin(), keys.end(), key) == 1);
  }
  const std::map<std::string, int> documented = documented_keys("docs/configuration.md");
  std::vector<std::string> undocumented;
  for (const std::string& key : keys) {
    if (documented.count(key) == 0) undocumented.push_back(key);
  }
  INFO(
      "keys of lib/config/sections.cpp and layer_kinds.cpp with no row (`key` in the first "
      "cell of a key table) in docs/configuration.md:"
      << lines_of(undocumented));
  CHECK(undocumented.empty());

  std::vector<std::string> unknown;
  for (const auto& [key, line] : documented) {
    if (std::find(keys.begin(), keys.end(), key) == keys.end())
      unknown.push_back("docs/configuration.md:" + std::to_string(line) + ": " + key);
  }
  INFO("rows of docs/configuration.md naming a key the reader does not accept:"
       << lines_of(unknown));
  CHECK(unknown.empty());
}

TEST_CASE("every relative link of README.md and docs/*.md reaches its file and heading", "[docs]") {
  std::vector<std::string> broken;
  int files = 0;
  for (const fs::path& file : markdown_files()) {
    ++files;
    for (std::string& b : broken_links(file)) broken.push_back(std::move(b));
  }
  CHECK(files >= 2);
  INFO("broken links:" << lines_of(broken));
  CHECK(broken.empty());
}

namespace {

// A YAML file's lines without its comments: whole-line comments dropped, trailing ones cut.
std::vector<std::string> yaml_without_comments(const fs::path& file) {
  std::ifstream in(file);
  REQUIRE(in.good());
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) {
    const size_t first = line.find_first_not_of(' ');
    if (first != std::string::npos && line[first] == '#') continue;
    const size_t comment = line.find(" #");
    if (comment != std::string::npos) line.erase(comment);
    line.erase(line.find_last_not_of(' ') + 1);
    lines.push_back(line);
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  while (!lines.empty() && lines.front().empty()) lines.erase(lines.begin());
  return lines;
}

}  // namespace

TEST_CASE("the README's example config is configs/cpu_quickstart.yaml without its comments",
          "[docs]") {
  std::ifstream in("README.md");
  REQUIRE(in.good());
  std::vector<std::string> shown;
  std::string line;
  bool in_block = false;
  while (std::getline(in, line)) {
    if (line == "```yaml") {
      in_block = true;
    } else if (in_block && line == "```") {
      break;
    } else if (in_block) {
      shown.push_back(line);
    }
  }
  CHECK(shown == yaml_without_comments("configs/cpu_quickstart.yaml"));
}

TEST_CASE("the link check sees a missing file, a missing heading and GitHub's anchors", "[docs]") {
  CHECK(heading_anchor("Checkpoints and resume") == "checkpoints-and-resume");
  CHECK(heading_anchor("`data`: the data set") == "data-the-data-set");
  CHECK(heading_anchor("GPUs, CUDA_VISIBLE_DEVICES and batch jobs") ==
        "gpus-cuda_visible_devices-and-batch-jobs");
  const mnist::test::ScratchDir scratch;
  const fs::path dir = scratch.path();
  {
    std::ofstream(dir / "a.md") << "# Title\n## Part one\n## Part one\n"
                                << "[ok](#part-one) [ok](b.md) [ok](a.md#part-one-1)\n"
                                << "[web](https://example.org/x.md) `[code](nowhere.md)`\n"
                                << "```\n[fenced](nowhere.md)\n```\n"
                                << "[gone](missing.md) [bad anchor](b.md#nothing) [abs](/etc)\n";
    std::ofstream(dir / "b.md") << "# B\n";
  }
  const std::vector<std::string> broken = broken_links(dir / "a.md");
  INFO(lines_of(broken));
  REQUIRE(broken.size() == 3);
  CHECK(broken[0].find("missing.md (no such file)") != std::string::npos);
  CHECK(broken[1].find("#nothing") != std::string::npos);
  CHECK(broken[2].find("absolute") != std::string::npos);
}
