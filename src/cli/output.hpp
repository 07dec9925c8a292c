#pragma once
// Printing: stdout carries the compatible tokens of overlay_setup.py; errors go to stderr as
// one line prefixed with the subcommand.
#include <functional>
#include <string>

namespace overlay::cli {

void out_line(const std::string& s);
void err_line(const std::string& subcommand, const std::string& msg);

// Runs a subcommand body, turning an exception into one stderr line and an exit status.
int guarded(const std::string& subcommand, const std::function<int()>& body);

}  // namespace overlay::cli
