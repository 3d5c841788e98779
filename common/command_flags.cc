// A command's flag table: parsing and the generated help (command_flags.h).
#include "common/command_flags.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace gantry {

namespace {

template <typename T>
std::string NumberText(T v) {
  return absl::StrCat(v);
}

}  // namespace

// Words of `text` in lines of at most `width` characters (a longer word stands alone).
std::vector<std::string> WrapWords(const std::string& text, size_t width) {
  std::vector<std::string> lines;
  std::string line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(line);
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) lines.push_back(line);
  return lines;
}


std::string HelpRow(std::string left, const std::string& text, size_t column, size_t width) {
  std::string out;
  if (left.size() + 2 > column) {  // too wide: the text starts on the next line
    absl::StrAppend(&out, left, "\n");
    left.clear();
  }
  const std::vector<std::string> lines = WrapWords(text, width);
  for (const std::string& line : lines) {
    left.resize(column, ' ');
    absl::StrAppend(&out, left, line, "\n");
    left.clear();
  }
  if (lines.empty() && !left.empty()) absl::StrAppend(&out, left, "\n");
  return out;
}

CommandFlags::CommandFlags(std::string program, std::string command, std::string operands, std::string summary)
    : program_(std::move(program)),
      command_(std::move(command)),
      operands_(std::move(operands)),
      summary_(std::move(summary)) {}

std::string CommandFlags::title() const { return command_.empty() ? program_ : absl::StrCat(program_, " ", command_); }

CommandFlags::Flag CommandFlags::NewFlag(const std::string& name, const std::string& metavar,
                                        const std::string& help) {
  Flag f;
  f.name = name;
  f.metavar = metavar;
  f.help = help;
  return f;
}

CommandFlags& CommandFlags::Add(Flag f, std::string default_text) {
  f.default_text = std::move(default_text);
  for (const Flag& g : flags_) {
    // Two definitions of one name are the program's mistake, not the user's: the later one
    // would never be reached.
    if (!g.global && g.name == f.name) std::abort();
  }
  flags_.push_back(std::move(f));
  return *this;
}

CommandFlags& CommandFlags::String(const std::string& name, std::string* value, const std::string& metavar,
                                   const std::string& help) {
  Flag f = NewFlag(name, metavar, help);
  f.set = [value](const std::string& v) {
    *value = v;
    return absl::OkStatus();
  };
  return Add(std::move(f), *value);
}

template <typename T>
CommandFlags& CommandFlags::Number(const std::string& name, T* value, const std::string& metavar,
                                   const std::string& help) {
  Flag f = NewFlag(name, metavar, help);
  f.set = [name, value](const std::string& v) {
    bool ok;
    if constexpr (std::is_integral_v<T>) {
      ok = absl::SimpleAtoi(v, value);
    } else if constexpr (std::is_same_v<T, float>) {
      ok = absl::SimpleAtof(v, value);
    } else {
      ok = absl::SimpleAtod(v, value);
    }
    if (ok) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, std::is_integral_v<T> ? " takes a whole number, not '" : " takes a number, not '", v,
                     "'"));
  };
  return Add(std::move(f), NumberText(*value));
}

CommandFlags& CommandFlags::Int(const std::string& name, int* value, const std::string& metavar,
                                const std::string& help) {
  return Number(name, value, metavar, help);
}

CommandFlags& CommandFlags::Int(const std::string& name, int64_t* value, const std::string& metavar,
                                const std::string& help) {
  return Number(name, value, metavar, help);
}

CommandFlags& CommandFlags::Double(const std::string& name, double* value, const std::string& metavar,
                                   const std::string& help) {
  return Number(name, value, metavar, help);
}

CommandFlags& CommandFlags::Float(const std::string& name, float* value, const std::string& metavar,
                                  const std::string& help) {
  return Number(name, value, metavar, help);
}

CommandFlags& CommandFlags::Choice(const std::string& name, std::string* value,
                                   const std::vector<std::string>& choices, const std::string& help) {
  Flag f = NewFlag(name, absl::StrJoin(choices, "|"), help);
  f.set = [name, value, choices](const std::string& v) {
    if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
      std::string list = choices.size() == 1 ? choices[0]
                                             : absl::StrCat(absl::StrJoin(choices.begin(), choices.end() - 1, ", "),
                                                            " or ", choices.back());
      return absl::InvalidArgumentError(absl::StrCat("--", name, " is ", list, ", not '", v, "'"));
    }
    *value = v;
    return absl::OkStatus();
  };
  return Add(std::move(f), *value);
}

CommandFlags& CommandFlags::Switch(const std::string& name, bool* value, const std::string& help) {
  Flag f = NewFlag(name, "", help);
  f.takes_value = false;
  f.set = [name, value](const std::string& v) {
    if (v.empty() || v == "true" || v == "1") {
      *value = true;
    } else if (v == "false" || v == "0") {
      *value = false;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("--", name, " takes no value (or =true, =false), not '", v, "'"));
    }
    return absl::OkStatus();
  };
  return Add(std::move(f), "");
}

CommandFlags& CommandFlags::Repeated(const std::string& name, std::vector<std::string>* values,
                                     const std::string& metavar, const std::string& help) {
  Flag f = NewFlag(name, metavar, absl::StrCat(help, " (repeatable)"));
  f.set = [values](const std::string& v) {
    values->push_back(v);
    return absl::OkStatus();
  };
  return Add(std::move(f), "");
}

CommandFlags& CommandFlags::Short(char letter) {
  flags_.back().letter = letter;
  return *this;
}

CommandFlags& CommandFlags::Default(const std::string& text) {
  flags_.back().default_text = text;
  return *this;
}

CommandFlags& CommandFlags::Operands(std::vector<std::string>* values, int min, int max) {
  operand_values_ = values;
  min_operands_ = min;
  max_operands_ = max;
  return *this;
}

CommandFlags& CommandFlags::Inherit(const CommandFlags& globals) {
  for (Flag f : globals.flags_) {
    f.global = true;
    flags_.push_back(std::move(f));
  }
  return *this;
}

const CommandFlags::Flag* CommandFlags::Find(const std::string& name) const {
  const Flag* global = nullptr;
  for (const Flag& f : flags_) {
    if (f.name != name) continue;
    if (!f.global) return &f;
    if (global == nullptr) global = &f;
  }
  return global;
}

const CommandFlags::Flag* CommandFlags::FindLetter(char letter) const {
  const Flag* global = nullptr;
  for (const Flag& f : flags_) {
    if (f.letter != letter) continue;
    if (!f.global) return &f;
    if (global == nullptr) global = &f;
  }
  return global;
}

absl::Status CommandFlags::Error(const std::string& what) const {
  return absl::InvalidArgumentError(absl::StrCat(command_.empty() ? "" : absl::StrCat(command_, ": "), what, " (",
                                                 title(), " --help lists its flags)"));
}

std::vector<std::string> CommandFlags::names() const {
  std::vector<std::string> out;
  for (const Flag& f : flags_) {
    if (Find(f.name) == &f) out.push_back("--" + f.name);
  }
  return out;
}

absl::Status CommandFlags::Parse(const std::vector<std::string>& args) {
  size_t unused = 0;
  return ParseFrom(args, false, &unused);
}

absl::StatusOr<size_t> CommandFlags::ParseLeading(const std::vector<std::string>& args) {
  size_t at = 0;
  if (auto s = ParseFrom(args, true, &at); !s.ok()) return s;
  return at;
}

absl::Status CommandFlags::ParseFrom(const std::vector<std::string>& args, bool stop_at_operand,
                                     size_t* stopped_at) {
  std::vector<std::string> operands;
  absl::Status value_error;  // the first value refused: reported unless --help was asked for
  bool flags_ended = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    const bool is_flag = !flags_ended && a.size() > 1 && a[0] == '-';
    if (!is_flag) {
      if (stop_at_operand) break;
      operands.push_back(a);
      continue;
    }
    if (a == "--") {
      flags_ended = true;
      continue;
    }
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    const Flag* f = nullptr;
    std::string shown = a, value;
    bool has_value = false;
    if (a.rfind("--", 0) == 0) {
      std::string name = a.substr(2);
      if (const size_t eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        has_value = true;
        shown = "--" + name;
      }
      f = Find(name);
    } else if (a.size() == 2) {
      f = FindLetter(a[1]);
    }
    if (f == nullptr) {
      // A negative number is an operand, not a flag.
      double number = 0;
      if (absl::SimpleAtod(a, &number) && !stop_at_operand) {
        operands.push_back(a);
        continue;
      }
      return Error(absl::StrCat("unknown flag ", shown));
    }
    if (f->takes_value && !has_value) {
      if (i + 1 >= args.size()) return Error(absl::StrCat(shown, " needs a value (", f->metavar, ")"));
      value = args[++i];
    }
    if (auto s = f->set(value); !s.ok() && value_error.ok()) value_error = Error(std::string(s.message()));
    if (given_.insert(f->name).second) given_order_.push_back("--" + f->name);
  }
  *stopped_at = i;
  if (help_) return absl::OkStatus();
  if (!value_error.ok()) return value_error;
  if (stop_at_operand) return absl::OkStatus();
  if (operand_values_ == nullptr) {
    if (!operands.empty()) return Error(absl::StrCat("unexpected argument '", operands[0], "'"));
    return absl::OkStatus();
  }
  const int n = static_cast<int>(operands.size());
  if (n < min_operands_ || (max_operands_ >= 0 && n > max_operands_)) {
    if (max_operands_ >= 0 && n > max_operands_) {
      return Error(absl::StrCat("unexpected argument '", operands[static_cast<size_t>(max_operands_)], "' (takes ",
                                operands_, ")"));
    }
    return Error(absl::StrCat("needs ", operands_));
  }
  *operand_values_ = std::move(operands);
  return absl::OkStatus();
}

std::string CommandFlags::Help() const {
  std::string out = absl::StrCat("usage: ", title(), flags_.empty() ? "" : " [flags]",
                                 operands_.empty() ? "" : " ", operands_, "\n");
  for (const std::string& line : WrapWords(summary_, 96)) absl::StrAppend(&out, "  ", line, "\n");
  auto section = [&](bool global) {
    std::string lines;
    for (const Flag& f : flags_) {
      if (f.global != global || Find(f.name) != &f) continue;
      const bool letter = f.letter != 0 && FindLetter(f.letter) == &f;  // not shadowed by the command's
      std::string left = absl::StrCat("  ", letter ? absl::StrCat("-", std::string(1, f.letter), ", ") : "", "--",
                                      f.name, f.metavar.empty() ? "" : " ", f.metavar);
      std::string text = f.help;
      if (!f.default_text.empty()) absl::StrAppend(&text, " (default ", f.default_text, ")");
      absl::StrAppend(&lines, HelpRow(left, text, 30, 70));
    }
    return lines;
  };
  if (std::string own = section(false); !own.empty()) absl::StrAppend(&out, "flags:\n", own);
  if (std::string global = section(true); !global.empty()) {
    absl::StrAppend(&out, "flags of every ", program_, " command:\n", global);
  }
  return out;
}

}  // namespace gantry
