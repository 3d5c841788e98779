// whoami (the caller as the coordinator knows it) and principals hash (a token's SHA-256 for
// the principals file, common/principals.h).
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>

#include "absl/strings/ascii.h"
#include "cli/commands.h"
#include "common/principals.h"

namespace gantry::cli {

// whoami
int WhoAmICommand(const Options& o, v1::Coordinator::Stub* stub) {
  if (o.args.size() != 1) {
    std::fprintf(stderr, "gantry: whoami takes no arguments\n");
    return 2;
  }
  v1::WhoAmIResponse resp;
  const grpc::Status s = stub->WhoAmI(Ctx(o).get(), v1::WhoAmIRequest(), &resp);
  if (!s.ok()) return Fail(s);
  if (o.output == "json") {
    std::printf("%s\n", Json(resp).c_str());
    return 0;
  }
  auto dash = [](const std::string& v) { return v.empty() ? std::string("-") : v; };
  std::printf("name:  %s\nkind:  %s\nteam:  %s\nrole:  %s\nby:    %s\n", resp.name().c_str(), resp.kind().c_str(),
              dash(resp.team()).c_str(), dash(resp.role()).c_str(), resp.authenticated_by().c_str());
  return 0;
}

// principals hash: the token on stdin (one line; surrounding white space dropped), its hash on
// stdout. From stdin, so that the token stays out of the shell's history and `ps`.
int PrincipalsCommand(const std::vector<std::string>& args) {
  if (args.size() != 2 || args[1] != "hash") {
    std::fprintf(stderr, "usage: gantry principals hash < TOKEN_FILE   (prints the token's token_sha256)\n");
    return 2;
  }
  const std::string in((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  const std::string token(absl::StripAsciiWhitespace(in));
  if (token.empty()) {
    std::fprintf(stderr, "gantry: principals hash: no token on stdin\n");
    return 2;
  }
  if (token.find_first_of("\r\n") != std::string::npos) {
    std::fprintf(stderr, "gantry: principals hash: stdin holds more than one line: give one token\n");
    return 2;
  }
  std::printf("%s\n", Sha256Hex(token).c_str());
  return 0;
}

}  // namespace gantry::cli
