#pragma once
// Printing: stdout carries the compatible tokens of overlay_setup.py; errors go to stderr as
// one line prefixed with the subcommand.
#include <string>

namespace overlay::cli {

void out_line(const std::string& s);
void err_line(const std::string& subcommand, const std::string& msg);

}  // namespace overlay::cli
