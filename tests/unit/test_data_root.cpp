// The data root (config/data_root.hpp): which option or variable wins, and which data.dir moves.
#include <catch2/catch.hpp>

#include "config/data_root.hpp"

TEST_CASE("the data root: --data-root, else MNIST_DATA, else none", "[config][data_root]") {
  auto env = [](const char* value) {
    return [value](const char* name) -> const char* {
      return std::string(name) == "MNIST_DATA" ? value : nullptr;
    };
  };
  CHECK(mnist::data_root("/opt/d", env("/env/d")) == "/opt/d");
  CHECK(mnist::data_root("", env("/env/d")) == "/env/d");
  CHECK(mnist::data_root("", env(nullptr)).empty());
}

TEST_CASE("only data.dir's default moves under the data root", "[config][data_root]") {
  mnist::DataConfig d;
  d.dataset = "mnist-small";
  d.dir = "data/mnist-small";
  mnist::apply_data_root(d, "/srv/mnist/");
  CHECK(d.dir == "/srv/mnist/mnist-small");
  d.dir = "./data/mnist-small";
  mnist::apply_data_root(d, "/srv/mnist");
  CHECK(d.dir == "/srv/mnist/mnist-small");
  d.dir = "elsewhere/digits";  // written by the user: kept
  mnist::apply_data_root(d, "/srv/mnist");
  CHECK(d.dir == "elsewhere/digits");
  d.dir = "data/mnist-small";
  mnist::apply_data_root(d, "");  // no root: as before
  CHECK(d.dir == "data/mnist-small");
}
