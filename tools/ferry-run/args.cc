#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace ferry::run {

bool parseRankCount(const std::string& text, int* out) {
  if (text.empty() || text.size() > 9) return false;
  int value = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  *out = value;
  return true;
}

bool parseSeconds(const std::string& text, double* out) {
  if (text.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  if (errno != 0 || end != text.c_str() + text.size()) return false;
  if (!std::isfinite(value) || value < 0) return false;
  *out = value;
  return true;
}

namespace {

// Splits "--name=value" into name and value; `hasValue` says whether '=' was there.
void splitLong(const std::string& arg, std::string* name, std::string* value, bool* hasValue) {
  size_t eq = arg.find('=');
  *hasValue = arg.rfind("--", 0) == 0 && eq != std::string::npos;
  *name = *hasValue ? arg.substr(0, eq) : arg;
  *value = *hasValue ? arg.substr(eq + 1) : std::string();
}

// Applies one option that takes a value. Returns "" on success, else the error.
std::string applyValue(const std::string& name, const std::string& value, Options* opts,
                       bool* timeoutGiven) {
  if (name == "-n" || name == "--nranks") {
    if (!parseRankCount(value, &opts->nranks)) return "invalid rank count '" + value + "'";
    if (opts->nranks < 1) return "rank count must be at least 1";
    if (opts->nranks > kMaxRanks) return "rank count above " + std::to_string(kMaxRanks);
    return "";
  }
  if (name == "--runtime") {
    if (value == "host") {
      opts->runtime = RuntimeChoice::Host;
    } else if (value == "cuda") {
      opts->runtime = RuntimeChoice::Cuda;
    } else {
      return "--runtime must be host or cuda, not '" + value + "'";
    }
    return "";
  }
  if (name == "--hosts") {
    if (!parseRankCount(value, &opts->hosts) || opts->hosts < 1) {
      return "invalid host count '" + value + "'";
    }
    return "";
  }
  // --timeout
  if (!parseSeconds(value, &opts->timeoutSec)) return "invalid --timeout '" + value + "'";
  *timeoutGiven = true;
  return "";
}

bool takesValue(const std::string& name) {
  return name == "-n" || name == "--nranks" || name == "--runtime" || name == "--timeout" ||
         name == "--hosts";
}

ParsedArgs fail(std::string message) {
  ParsedArgs parsed;
  parsed.action = Action::Error;
  parsed.error = std::move(message);
  return parsed;
}

}  // namespace

ParsedArgs parseArgs(const std::vector<std::string>& args, double envTimeoutSec) {
  ParsedArgs parsed;
  Options& opts = parsed.options;
  bool timeoutGiven = false;
  bool wantParams = false;
  bool nGiven = false;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // the program starts here
    if (arg == "-h" || arg == "--help") {
      parsed.action = Action::Help;
      return parsed;
    }
    if (arg == "--params") {
      wantParams = true;
      continue;
    }
    if (arg == "--isolate-gpus") {
      opts.isolateGpus = true;
      continue;
    }
    std::string name, value;
    bool hasValue = false;
    splitLong(arg, &name, &value, &hasValue);
    if (!hasValue && name.size() > 2 && name.rfind("-n", 0) == 0 && name[2] != '-') {
      value = name.substr(2);  // "-n4"
      name = "-n";
      hasValue = true;
    }
    if (!takesValue(name)) return fail("unknown option '" + arg + "'");
    if (!hasValue) {
      if (i + 1 >= args.size()) return fail("option '" + name + "' needs a value");
      value = args[++i];
    }
    std::string error = applyValue(name, value, &opts, &timeoutGiven);
    if (!error.empty()) return fail(error);
    if (name == "-n" || name == "--nranks") nGiven = true;
  }
  if (wantParams) {
    parsed.action = Action::Params;
    return parsed;
  }
  opts.command.assign(args.begin() + static_cast<long>(i), args.end());
  if (!nGiven) return fail("missing -n N");
  if (opts.hosts > opts.nranks) return fail("--hosts is larger than the rank count");
  if (opts.command.empty()) return fail("no program given");
  if (!timeoutGiven) opts.timeoutSec = envTimeoutSec;
  parsed.action = Action::Run;
  return parsed;
}

std::string usageText() {
  return "usage: ferry-run -n N [--runtime host|cuda] [--timeout S] [--isolate-gpus] "
         "[--hosts H] prog [args...]\n"
         "       ferry-run --params | -h | --help\n"
         "\n"
         "Starts N local ranks of `prog` and relays their output, each line prefixed\n"
         "\"[<rank>] \" (stdout to stdout, stderr to stderr).\n"
         "\n"
         "  -n, --nranks N   number of ranks (1.." +
         std::to_string(kMaxRanks) +
         ")\n"
         "  --runtime R      host or cuda; exported as FERRY_RUNTIME (default: Ferry's auto)\n"
         "  --timeout S      kill every rank after S seconds and exit 124\n"
         "                   (default: FERRY_RUN_TIMEOUT, else none)\n"
         "  --isolate-gpus   also set CUDA_VISIBLE_DEVICES to the rank's one GPU\n"
         "  --hosts H        emulate H hosts: ranks split into H equal runs, each run's\n"
         "                   NCCL_HOSTID=ferry-run-host<h>, so ranks of different runs\n"
         "                   talk through the network engine (over loopback)\n"
         "  --params         print Ferry's knobs with their values and defaults\n"
         "  -h, --help       this text\n"
         "\n"
         "Each rank gets NCCL_COMM_ID=127.0.0.1:<free port> (rank 0 hosts the bootstrap\n"
         "root, with Ferry and with NCCL), FERRY_RANK, FERRY_NRANKS, RANK, WORLD_SIZE,\n"
         "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT (a second free port),\n"
         "and FERRY_DEVICE: the device the program should select. With GPUs (from\n"
         "CUDA_VISIBLE_DEVICES, else /proc/driver/nvidia/gpus) rank i uses GPU i mod G,\n"
         "so FERRY_DEVICE = i mod G, or 0 with --isolate-gpus (one GPU visible); on the\n"
         "host runtime FERRY_DEVICE = i mod FERRY_HOST_DEVICES. Programs call\n"
         "cudaSetDevice(FERRY_DEVICE) themselves.\n"
         "\n"
         "Exit status: 0 when every rank exits 0; else the first failing rank's code\n"
         "(128+signal when killed), the others being stopped (SIGTERM, SIGKILL 3 s\n"
         "later); 124 on timeout; 2 on bad arguments. SIGINT/SIGTERM/SIGHUP are\n"
         "forwarded to the ranks; a second one kills them.\n";
}

}  // namespace ferry::run
