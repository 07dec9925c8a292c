#pragma once
// Printing. By default stdout carries the compatible tokens of overlay_setup.py and errors go to
// stderr as one line prefixed with the subcommand. With --json, stdout carries exactly one JSON
// document (the fields a subcommand put into result(), plus schema/command/ok/exit/error) and
// the human text moves to stderr.
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace overlay::cli {

inline constexpr int kJsonSchema = 1;

void set_json_mode(bool on);
bool json_mode();
// A fleet node's run (--fleet-node, set by `overlay fleet`): the document is one line, and names
// this node (as its engine names it, else by its host name) in "node", for the coordinator to read.
void set_fleet_node(bool on);

// One line of human output: stdout, or stderr under --json.
void out_line(const std::string& s);
void err_line(const std::string& subcommand, const std::string& msg);

// The JSON document the running subcommand fills in.
nlohmann::json& result();

// Prints the JSON document for `subcommand` finishing with exit status `rc` (and `error`).
void emit_json(const std::string& subcommand, int rc, const std::string& error = {});

// Runs a subcommand body, turning an exception into one stderr line and an exit status; under
// --json, prints the one document either way.
int guarded(const std::string& subcommand, const std::function<int()>& body);

// True when stderr is a terminal and NO_COLOR is unset: log levels may be coloured.
bool stderr_is_fancy();

// Shows the library's progress reports as one rewritten line on stderr, when stderr is a
// terminal (and TERM is not "dumb"); does nothing otherwise.
void install_progress_line();

}  // namespace overlay::cli
