// Catch2 entry point for the integration tests: they run the mnist-train binary or read real data.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
