// The command-line flag table both front ends parse with (common/command_flags.h): values of
// each type, defaults, the errors (each naming the flag and the command), operands, the global
// flags a command inherits, and the help text generated from the definitions.
#include "common/command_flags.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gantry {
namespace {

// A command with a flag of each kind, bound to the fields of Values.
struct Values {
  std::string prompt;
  int tokens = 200;
  int64_t step = -1;
  double memory = 0;
  float temperature = 0.8f;
  std::string dtype = "fp32";
  bool wait = false;
  std::vector<std::string> val;
  std::vector<std::string> operands;
};

CommandFlags Define(Values* v) {
  CommandFlags f("gantry", "sample", "JOB", "generate text from a job's checkpoint");
  f.String("prompt", &v->prompt, "TEXT", "the text to continue")
      .Int("tokens", &v->tokens, "N", "how many tokens to generate")
      .Int("step", &v->step, "N", "the checkpoint of step N")
      .Default("the newest")
      .Double("gpu-memory", &v->memory, "GB", "each GPU's memory")
      .Default("")
      .Float("temperature", &v->temperature, "T", "softmax temperature")
      .Choice("dtype", &v->dtype, {"fp32", "bf16"}, "the weights' type")
      .Switch("wait", &v->wait, "wait for it")
      .Repeated("val", &v->val, "INPUT", "a validation file")
      .Operands(&v->operands, 1, 1);
  return f;
}

TEST(CommandFlagsTest, DefaultsStandWhereNoFlagIsGiven) {
  Values v;
  CommandFlags f = Define(&v);
  ASSERT_TRUE(f.Parse({"j-000001"}).ok());
  EXPECT_EQ(v.tokens, 200);
  EXPECT_EQ(v.step, -1);
  EXPECT_FLOAT_EQ(v.temperature, 0.8f);
  EXPECT_EQ(v.dtype, "fp32");
  EXPECT_FALSE(v.wait);
  EXPECT_TRUE(v.val.empty());
  EXPECT_EQ(v.operands, std::vector<std::string>{"j-000001"});
  EXPECT_FALSE(f.given("tokens"));
  EXPECT_FALSE(f.help());
}

TEST(CommandFlagsTest, ParsesEachKindInEitherSpelling) {
  Values v;
  CommandFlags f = Define(&v);
  ASSERT_TRUE(f.Parse({"--prompt", "The GPU", "--tokens=64", "j-000001", "--step", "30", "--gpu-memory", "80.5",
                       "--temperature=0", "--dtype", "bf16", "--wait", "--val", "a.txt", "--val=b.txt"})
                  .ok());
  EXPECT_EQ(v.prompt, "The GPU");
  EXPECT_EQ(v.tokens, 64);
  EXPECT_EQ(v.step, 30);
  EXPECT_DOUBLE_EQ(v.memory, 80.5);
  EXPECT_FLOAT_EQ(v.temperature, 0.0f);
  EXPECT_EQ(v.dtype, "bf16");
  EXPECT_TRUE(v.wait);
  EXPECT_EQ(v.val, (std::vector<std::string>{"a.txt", "b.txt"}));
  EXPECT_EQ(v.operands, std::vector<std::string>{"j-000001"});
  EXPECT_TRUE(f.given("step"));
  EXPECT_EQ(f.given_in_order(), (std::vector<std::string>{"--prompt", "--tokens", "--step", "--gpu-memory",
                                                          "--temperature", "--dtype", "--wait", "--val"}));
}

TEST(CommandFlagsTest, TheLastValueWinsAndASwitchTakesTrueOrFalse) {
  Values v;
  CommandFlags f = Define(&v);
  ASSERT_TRUE(f.Parse({"--tokens", "1", "--tokens", "2", "--wait=true", "--wait=false", "j"}).ok());
  EXPECT_EQ(v.tokens, 2);
  EXPECT_FALSE(v.wait);
}

TEST(CommandFlagsTest, DoubleDashEndsTheFlagsAndANegativeNumberIsAnOperand) {
  Values v;
  CommandFlags f = Define(&v);
  ASSERT_TRUE(f.Parse({"--", "--wait"}).ok());
  EXPECT_FALSE(v.wait);
  EXPECT_EQ(v.operands, std::vector<std::string>{"--wait"});
  Values w;
  CommandFlags g = Define(&w);
  ASSERT_TRUE(g.Parse({"--step", "-1", "-5"}).ok());
  EXPECT_EQ(w.step, -1);
  EXPECT_EQ(w.operands, std::vector<std::string>{"-5"});
}

// Each error is one line that names the command and the flag, and where to read the flags.
std::string ErrorOf(const std::vector<std::string>& args) {
  Values v;
  CommandFlags f = Define(&v);
  const absl::Status s = f.Parse(args);
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  const std::string m(s.message());
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_NE(m.find("(gantry sample --help lists its flags)"), std::string::npos) << m;
  return m;
}

TEST(CommandFlagsTest, ErrorsNameTheFlagAndTheCommand) {
  EXPECT_EQ(ErrorOf({"j", "--bogus"}).rfind("sample: unknown flag --bogus", 0), 0u);
  EXPECT_EQ(ErrorOf({"j", "--bogus=3"}).rfind("sample: unknown flag --bogus ", 0), 0u);
  EXPECT_EQ(ErrorOf({"j", "-x"}).rfind("sample: unknown flag -x", 0), 0u);
  EXPECT_EQ(ErrorOf({"j", "--tokens"}).rfind("sample: --tokens needs a value (N)", 0), 0u);
  EXPECT_EQ(ErrorOf({"j", "--tokens", "ten"}).rfind("sample: --tokens takes a whole number, not 'ten'", 0), 0u);
  EXPECT_EQ(ErrorOf({"j", "--tokens", "1.5"}).rfind("sample: --tokens takes a whole number, not '1.5'", 0), 0u);
  EXPECT_EQ(ErrorOf({"j", "--tokens", "99999999999"}).rfind("sample: --tokens takes a whole number", 0), 0u);
  EXPECT_EQ(ErrorOf({"j", "--gpu-memory", "lots"}).rfind("sample: --gpu-memory takes a number, not 'lots'", 0), 0u);
  EXPECT_EQ(ErrorOf({"j", "--temperature="}).rfind("sample: --temperature takes a number, not ''", 0), 0u);
  EXPECT_EQ(ErrorOf({"j", "--dtype", "fp8"}).rfind("sample: --dtype is fp32 or bf16, not 'fp8'", 0), 0u);
  EXPECT_EQ(ErrorOf({"j", "--wait=maybe"}).rfind("sample: --wait takes no value (or =true, =false), not 'maybe'", 0),
            0u);
  EXPECT_EQ(ErrorOf({}).rfind("sample: needs JOB", 0), 0u);
  EXPECT_EQ(ErrorOf({"j", "k"}).rfind("sample: unexpected argument 'k' (takes JOB)", 0), 0u);
}

TEST(CommandFlagsTest, ACommandWithoutOperandsRefusesOne) {
  int n = 0;
  CommandFlags f("gantry-train", "", "", "train");
  f.Int("threads", &n, "N", "threads");
  const absl::Status s = f.Parse({"spec.yaml"});
  EXPECT_EQ(s.message(), "unexpected argument 'spec.yaml' (gantry-train --help lists its flags)");
}

TEST(CommandFlagsTest, HelpIsGeneratedFromTheDefinitions) {
  Values v;
  CommandFlags f = Define(&v);
  ASSERT_TRUE(f.Parse({"--help"}).ok());  // no operand needed to ask for help
  EXPECT_TRUE(f.help());
  const std::string help = f.Help();
  EXPECT_EQ(help.rfind("usage: gantry sample [flags] JOB\n  generate text from a job's checkpoint\nflags:\n", 0), 0u)
      << help;
  for (const char* line :
       {"  --prompt TEXT               the text to continue\n",
        "  --tokens N                  how many tokens to generate (default 200)\n",
        "  --step N                    the checkpoint of step N (default the newest)\n",
        "  --gpu-memory GB             each GPU's memory\n",  // Default(""): none shown
        "  --temperature T             softmax temperature (default 0.8)\n",
        "  --dtype fp32|bf16           the weights' type (default fp32)\n",
        "  --wait                      wait for it\n",
        "  --val INPUT                 a validation file (repeatable)\n"}) {
    EXPECT_NE(help.find(line), std::string::npos) << "missing: " << line << "in:\n" << help;
  }
  EXPECT_EQ(f.names(), (std::vector<std::string>{"--prompt", "--tokens", "--step", "--gpu-memory", "--temperature",
                                                 "--dtype", "--wait", "--val"}));
  Values w;
  CommandFlags g = Define(&w);
  ASSERT_TRUE(g.Parse({"j", "-h"}).ok());
  EXPECT_TRUE(g.help());
}

// Asked for help, a bad value is no error (tests/cli/help_test.sh gives every flag "x" beside
// --help to show that each one listed is taken); an unknown flag still is.
TEST(CommandFlagsTest, HelpOutranksABadValueButNotAnUnknownFlag) {
  Values v;
  CommandFlags f = Define(&v);
  EXPECT_TRUE(f.Parse({"--tokens=x", "--dtype=x", "--wait=x", "--help"}).ok());
  EXPECT_TRUE(f.help());
  Values w;
  CommandFlags g = Define(&w);
  EXPECT_EQ(g.Parse({"--help", "--tokens=x", "--bogus=x"}).message(),
            "sample: unknown flag --bogus (gantry sample --help lists its flags)");
  Values u;
  CommandFlags h = Define(&u);
  EXPECT_EQ(h.Parse({"--tokens=x", "--dtype=x", "j"}).message(),
            "sample: --tokens takes a whole number, not 'x' (gantry sample --help lists its flags)");
}

TEST(CommandFlagsTest, LongHelpWrapsUnderItsFlag) {
  std::string layout;
  CommandFlags f("gantry", "plan", "", "plan");
  f.String("layout", &layout, "tp=T,pp=P[,dp=D][,zero=S][,mb=B]",
           "with --cluster: evaluate this layout only, and print its step time, tokens per second and the "
           "memory each GPU needs");
  EXPECT_EQ(f.Help(),
            "usage: gantry plan [flags]\n  plan\nflags:\n"
            "  --layout tp=T,pp=P[,dp=D][,zero=S][,mb=B]\n"
            "                              with --cluster: evaluate this layout only, and print its step time,\n"
            "                              tokens per second and the memory each GPU needs\n");
}

// A program's global flags (gantry's --coordinator and -o) before the command and after it;
// the command's own flag of the same letter (export's -o DIR) shadows the global one.
TEST(CommandFlagsTest, GlobalFlagsBeforeAndAfterTheCommand) {
  std::string coordinator = "127.0.0.1:7070", output = "table";
  CommandFlags globals("gantry", "", "COMMAND", "the CLI");
  globals.String("coordinator", &coordinator, "HOST:PORT", "the coordinator")
      .Choice("output", &output, {"table", "json"}, "the output format")
      .Short('o');
  const std::vector<std::string> args = {"--coordinator=h:1", "checkpoints", "j", "-o", "json"};
  auto at = globals.ParseLeading(args);
  ASSERT_TRUE(at.ok()) << at.status();
  EXPECT_EQ(*at, 1u);
  EXPECT_EQ(coordinator, "h:1");

  std::vector<std::string> job;
  CommandFlags checkpoints("gantry", "checkpoints", "JOB", "list");
  checkpoints.Operands(&job, 1, 1).Inherit(globals);
  ASSERT_TRUE(checkpoints.Parse({args.begin() + 2, args.end()}).ok());
  EXPECT_EQ(output, "json");
  EXPECT_EQ(job, std::vector<std::string>{"j"});

  std::string out_dir;
  output = "table";
  CommandFlags export_flags("gantry", "export", "JOB", "export");
  export_flags.String("out", &out_dir, "DIR", "the directory").Short('o').Operands(&job, 1, 1).Inherit(globals);
  ASSERT_TRUE(export_flags.Parse({"j", "-o", "/tmp/m", "--output", "json"}).ok());
  EXPECT_EQ(out_dir, "/tmp/m");
  EXPECT_EQ(output, "json");
  const std::string help = export_flags.Help();
  EXPECT_NE(help.find("  -o, --out DIR"), std::string::npos) << help;
  EXPECT_NE(help.find("flags of every gantry command:\n  --coordinator HOST:PORT"), std::string::npos) << help;
  EXPECT_NE(help.find("\n  --output table|json"), std::string::npos) << help;  // -o is export's here
  EXPECT_EQ(help.find("-o, --output"), std::string::npos) << help;
  EXPECT_EQ(export_flags.names(), (std::vector<std::string>{"--out", "--coordinator", "--output"}));

  // A bad global value is an error of the command it followed.
  CommandFlags workers("gantry", "workers", "", "list");
  workers.Inherit(globals);
  EXPECT_EQ(workers.Parse({"-o", "xml"}).message(),
            "workers: --output is table or json, not 'xml' (gantry workers --help lists its flags)");
}

TEST(CommandFlagsTest, WrapWordsKeepsLinesWithinTheWidth) {
  EXPECT_EQ(WrapWords("one two three four", 9), (std::vector<std::string>{"one two", "three", "four"}));
  EXPECT_EQ(WrapWords("a-very-long-word x", 4), (std::vector<std::string>{"a-very-long-word", "x"}));
  EXPECT_TRUE(WrapWords("", 10).empty());
}

}  // namespace
}  // namespace gantry
