// Command-line parsing for ferry-run, kept pure (no environment, no I/O) so the
// unit tests can cover every accepted and rejected form.
//
//   ferry-run -n N [--runtime host|cuda] [--timeout S] [--isolate-gpus] [--hosts H]
//             prog args...
//   ferry-run --params | -h | --help
//
// Options come first; the first token that is not an option (or everything
// after "--") is the program and its own arguments, passed on untouched.
#pragma once

#include <string>
#include <vector>

namespace ferry::run {

enum class RuntimeChoice { Auto, Host, Cuda };

struct Options {
  int nranks = 0;
  RuntimeChoice runtime = RuntimeChoice::Auto;
  double timeoutSec = 0;             // 0: no timeout
  bool isolateGpus = false;          // also set CUDA_VISIBLE_DEVICES=<gpu> per rank
  int hosts = 0;                     // --hosts H: emulate H hosts (NCCL_HOSTID); 0: off
  std::vector<std::string> command;  // program and its arguments
};

enum class Action { Run, Help, Params, Error };

struct ParsedArgs {
  Action action = Action::Error;
  Options options;
  std::string error;  // set when action == Error
};

// Largest rank count accepted; each rank costs two pipes and a process.
constexpr int kMaxRanks = 4096;

// `args` excludes argv[0]. `envTimeoutSec` is FERRY_RUN_TIMEOUT (0: unset);
// --timeout overrides it.
ParsedArgs parseArgs(const std::vector<std::string>& args, double envTimeoutSec);

// Strict parsers used by parseArgs (whole string must match).
bool parseRankCount(const std::string& text, int* out);
bool parseSeconds(const std::string& text, double* out);

// Usage text, ending with a newline.
std::string usageText();

}  // namespace ferry::run
