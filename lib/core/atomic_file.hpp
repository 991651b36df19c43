#pragma once
// Replacing a file so that a crash at any moment leaves either the old file or the complete new one
// under its name, never a partial file: write a hidden temporary file in the same directory
// (".<name>.tmp.<pid>"), fsync it, rename it over the name, fsync the directory.

#include <cstddef>
#include <string>

namespace mnist {

// Throws RuntimeError naming the file and the step that failed (create, write, fsync, rename);
// the temporary file is removed on failure.
void write_file_atomically(const std::string& path, const void* data, std::size_t size);

}  // namespace mnist
