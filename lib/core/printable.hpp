#pragma once
// Text from files and the command line, made safe to print inside an error message: control
// characters, DEL, backslashes and bytes that are not valid UTF-8 become escapes (\n, \t, \\,
// \xNN), so a damaged file's raw bytes can neither garble the terminal nor hide in the message.
// Valid UTF-8 (names with accents, CJK paths) is kept as written.

#include <string>
#include <string_view>

namespace mnist {

std::string printable(std::string_view text);

}  // namespace mnist
