// One command's flags, defined once each (name, the variable it sets, help), parsed from the
// command line, and its --help text generated from the same definitions. Both command-line
// front ends use it for every command: gantry (cli/main.cc) and gantry-train (cli/train/).
// The daemons keep gflags (process-wide flags suit a daemon); a command's flags are its own,
// so two commands may both take --step, each with its own meaning and help (docs/decisions.md,
// "One argument parser").
//
//   int tokens = 200;
//   std::string prompt;
//   CommandFlags f("gantry", "sample", "JOB", "generate text from a job's checkpoint");
//   f.Int("tokens", &tokens, "N", "tokens to generate").String("prompt", &prompt, "TEXT", "...");
//   if (auto s = f.Parse(args); !s.ok()) ... // "sample: --tokens takes a whole number, not 'x' ..."
//   if (f.help()) std::fputs(f.Help().c_str(), stdout);
//
// The value a variable holds before Parse is the flag's default, and --help shows it (or the
// text Default() gives). --name VALUE and --name=VALUE; a switch takes no value (--name, or
// --name=true|false); a repeated flag keeps every value; otherwise the last one given wins.
// "--" ends the flags: what follows is operands. -h and --help ask for the help text.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gantry {

class CommandFlags {
 public:
  // program: the binary ("gantry"); command: the subcommand ("sample"; empty for the
  // program's own); operands: the synopsis of the positional arguments ("JOB", "[ADDR]");
  // summary: what the command does, one sentence.
  CommandFlags(std::string program, std::string command, std::string operands, std::string summary);

  // A flag and the variable it sets; metavar names its value in the help ("N", "DIR").
  CommandFlags& String(const std::string& name, std::string* value, const std::string& metavar,
                       const std::string& help);
  CommandFlags& Int(const std::string& name, int* value, const std::string& metavar, const std::string& help);
  CommandFlags& Int(const std::string& name, int64_t* value, const std::string& metavar, const std::string& help);
  CommandFlags& Double(const std::string& name, double* value, const std::string& metavar, const std::string& help);
  CommandFlags& Float(const std::string& name, float* value, const std::string& metavar, const std::string& help);
  // One of `choices`: anything else is an error that lists them.
  CommandFlags& Choice(const std::string& name, std::string* value, const std::vector<std::string>& choices,
                       const std::string& help);
  // No value: given, it sets *value true.
  CommandFlags& Switch(const std::string& name, bool* value, const std::string& help);
  // May be given many times: each value is appended.
  CommandFlags& Repeated(const std::string& name, std::vector<std::string>* values, const std::string& metavar,
                         const std::string& help);

  // Of the flag defined last: a one-letter alias (-o), and the default as the help shows it
  // ("" shows none; without this call, the variable's value before Parse).
  CommandFlags& Short(char letter);
  CommandFlags& Default(const std::string& text);

  // The operands (positional arguments), between min and max of them (max < 0: any number).
  CommandFlags& Operands(std::vector<std::string>* values, int min, int max);
  // Flags every command of a program takes (gantry's --coordinator, -o): `globals`' flags,
  // bound to the same variables, listed apart in the help. A flag of this command's own with
  // the same name or letter shadows the global one (export's -o is its output directory).
  CommandFlags& Inherit(const CommandFlags& globals);

  // Parses args (those after the command's name). An error names the flag and the command:
  // "sample: unknown flag --bogus (gantry sample --help lists its flags)". With -h or --help
  // anywhere, a value a flag refuses is no error (the help is what was asked for); an unknown
  // flag or a missing value still is.
  absl::Status Parse(const std::vector<std::string>& args);
  // Parses the flags in front of the first operand (a program's global flags before its
  // command); returns the index of that operand (args.size() when there is none).
  absl::StatusOr<size_t> ParseLeading(const std::vector<std::string>& args);

  bool help() const { return help_; }  // -h or --help was given
  bool given(const std::string& name) const { return given_.count(name) > 0; }
  // The flags given, as --name, in the order first given.
  const std::vector<std::string>& given_in_order() const { return given_order_; }
  // Every flag this command takes (its own, then the inherited), as --name.
  std::vector<std::string> names() const;

  // The generated help: usage line, summary, each flag with its value, default and help.
  std::string Help() const;
  // "gantry sample", "gantry-train".
  std::string title() const;
  const std::string& summary() const { return summary_; }
  const std::string& operands_synopsis() const { return operands_; }

 private:
  struct Flag {
    std::string name, metavar, help, default_text;
    char letter = 0;
    bool takes_value = true;
    bool global = false;
    std::function<absl::Status(const std::string& value)> set;  // the value as given
  };
  template <typename T>
  CommandFlags& Number(const std::string& name, T* value, const std::string& metavar, const std::string& help);
  static Flag NewFlag(const std::string& name, const std::string& metavar, const std::string& help);
  CommandFlags& Add(Flag f, std::string default_text);
  const Flag* Find(const std::string& name) const;
  const Flag* FindLetter(char letter) const;
  absl::Status Error(const std::string& what) const;
  absl::Status ParseFrom(const std::vector<std::string>& args, bool stop_at_operand, size_t* stopped_at);

  std::string program_, command_, operands_, summary_;
  std::vector<Flag> flags_;
  std::vector<std::string>* operand_values_ = nullptr;
  int min_operands_ = 0, max_operands_ = 0;
  bool help_ = false;
  std::set<std::string> given_;
  std::vector<std::string> given_order_;
};

// The words of `text` in lines of at most `width` characters (a longer word stands alone).
std::vector<std::string> WrapWords(const std::string& text, size_t width);
// A row of a help text: `left` (a flag, a command), then `text` wrapped to `width` from
// column `column` (on the next line where `left` reaches it).
std::string HelpRow(std::string left, const std::string& text, size_t column, size_t width);

}  // namespace gantry
