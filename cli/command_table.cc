// The commands' table, looked up, and each command's flags parsed: what every gantry command
// shares. The table itself, kCommands, is the binary's (main.cc): it holds sample, which links
// the model and is not in gantry_cli; a test of a command in process defines a table of its own.
#include <cstdio>
#include <string>

#include "cli/commands.h"

namespace gantry::cli {

const Command* FindCommand(const std::string& name) {
  for (const Command& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

CommandFlags CommandFlagsFor(const Options& o) {
  const Command* c = FindCommand(o.command);
  CommandFlags f("gantry", o.command, c ? c->operands : "", c ? c->summary : "");
  if (o.globals != nullptr) f.Inherit(*o.globals);
  return f;
}

int ParseCommand(CommandFlags& f, const Options& o) {
  if (auto s = f.Parse(o.args); !s.ok()) {
    std::fprintf(stderr, "gantry: %s\n", std::string(s.message()).c_str());
    return 2;
  }
  if (f.help()) {
    std::fputs(f.Help().c_str(), stdout);
    return 0;
  }
  return -1;
}

}  // namespace gantry::cli
