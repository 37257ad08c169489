#include "ferry_bench/args.h"

#include <cctype>
#include <charconv>
#include <limits>

#include "ferry_bench/element.h"

namespace ferry::bench {
namespace {

template <typename T>
bool parseNumber(std::string_view text, T* out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

bool parseOpList(std::string_view text, std::vector<OpKind>* ops) {
  ops->clear();
  if (text == "all") {
    for (int i = 0; i < kOpCount; ++i) ops->push_back(static_cast<OpKind>(i));
    return true;
  }
  while (!text.empty()) {
    const size_t comma = text.find(',');
    OpKind kind;
    if (!parseOp(text.substr(0, comma), &kind)) return false;
    ops->push_back(kind);
    if (comma == std::string_view::npos) break;
    text.remove_prefix(comma + 1);
  }
  return !ops->empty();
}

bool parseInPlace(std::string_view text, InPlaceMode* mode) {
  if (text == "both")
    *mode = InPlaceMode::Both;
  else if (text == "only")
    *mode = InPlaceMode::Only;
  else if (text == "no")
    *mode = InPlaceMode::No;
  else
    return false;
  return true;
}

// Applies one option that takes a value. False with *error set on a bad value;
// *known false when `name` is not such an option.
bool applyValue(std::string_view name, std::string_view value, Options* o, bool* known,
                std::string* error) {
  *known = true;
  bool ok = true;
  if (name == "-b" || name == "--minbytes")
    ok = parseSize(value, &o->minBytes);
  else if (name == "-e" || name == "--maxbytes")
    ok = parseSize(value, &o->maxBytes);
  else if (name == "-f" || name == "--stepfactor")
    ok = parseNumber(value, &o->factor);
  else if (name == "-d" || name == "--datatype")
    ok = parseType(value, &o->type);
  else if (name == "-o" || name == "--op")
    ok = parseRedOp(value, &o->redop);
  else if (name == "-r" || name == "--root")
    ok = parseNumber(value, &o->root) && o->root >= 0;
  else if (name == "-w" || name == "--warmup_iters")
    ok = parseNumber(value, &o->warmup) && o->warmup >= 0;
  else if (name == "-n" || name == "--iters")
    ok = parseNumber(value, &o->iters) && o->iters >= 1;
  else if (name == "-g" || name == "--ngpus")
    ok = parseNumber(value, &o->gpus) && o->gpus >= 1;
  else if (name == "-c" || name == "--check") {
    int c = 0;
    ok = parseNumber(value, &c) && (c == 0 || c == 1);
    o->check = c == 1;
  } else if (name == "--inplace")
    ok = parseInPlace(value, &o->inPlace);
  else if (name == "--lib")
    o->lib = value;
  else if (name == "--compare")
    o->compare = value;
  else if (name == "--json")
    o->json = value;
  else if (name == "--json-out")
    o->jsonOut = value;
  else if (name == "--gemm-size")
    ok = parseSize(value, &o->gemmSize) && o->gemmSize >= 16;
  else if (name == "--rounds")
    ok = parseNumber(value, &o->rounds) && o->rounds >= 1 && o->rounds <= 99;
  else if (name == "--seed")
    ok = o->seedSet = parseNumber(value, &o->seed);
  else
    *known = false;
  if (*known && (!ok || value.empty())) {
    *error = "bad value '" + std::string(value) + "' for " + std::string(name);
    return false;
  }
  return true;
}

bool validate(Options* o, std::string* error) {
  if (o->ops.empty())
    *error = "missing <op>";
  else if (o->minBytes > o->maxBytes)
    *error = "-b is larger than -e";
  else if (o->minBytes < o->maxBytes && o->factor < 2)
    *error = "-f must be >= 2 when -b < -e";
  else if (!o->compare.empty() && !o->jsonOut.empty())
    *error = "--compare and --json-out exclude each other";
  else if (o->rounds > 1 && o->compare.empty())
    *error = "--rounds needs --compare";
  else
    return true;
  return false;
}

}  // namespace

bool parseSize(std::string_view text, size_t* bytes) {
  if (text.empty()) return false;
  size_t scale = 1;
  switch (std::toupper(static_cast<unsigned char>(text.back()))) {
    case 'K':
      scale = 1ull << 10;
      break;
    case 'M':
      scale = 1ull << 20;
      break;
    case 'G':
      scale = 1ull << 30;
      break;
    default:
      break;
  }
  if (scale != 1) text.remove_suffix(1);
  size_t value = 0;
  if (!parseNumber(text, &value)) return false;
  if (value > std::numeric_limits<size_t>::max() / scale) return false;
  *bytes = value * scale;
  return true;
}

bool parseArgs(int argc, const char* const* argv, Options* options, std::string* error) {
  Options o;
  bool haveOp = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      o.help = true;
      continue;
    }
    if (arg == "--overlap") {
      o.overlap = true;
      continue;
    }
    if (arg == "--overlap-nothing") {
      o.overlap = o.overlapNothing = true;
      continue;
    }
    if (arg == "--window") {
      o.window = true;
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-') {
      std::string_view name = arg, value;
      const size_t eq = arg.find('=');
      const bool inlineValue = arg.rfind("--", 0) == 0 && eq != std::string_view::npos;
      if (inlineValue) {
        name = arg.substr(0, eq);
        value = arg.substr(eq + 1);
      } else if (i + 1 < argc) {
        value = argv[i + 1];
      } else {
        *error = "option " + std::string(arg) + " needs a value";
        return false;
      }
      bool known = false;
      if (!applyValue(name, value, &o, &known, error)) return false;
      if (!known) {
        *error = "unknown option " + std::string(name);
        return false;
      }
      if (!inlineValue) ++i;
      continue;
    }
    if (haveOp) {
      *error = "unexpected argument '" + std::string(arg) + "'";
      return false;
    }
    if (!parseOpList(arg, &o.ops)) {
      *error = "unknown op '" + std::string(arg) + "'";
      return false;
    }
    haveOp = true;
  }
  if (!o.help && !validate(&o, error)) return false;
  *options = o;
  return true;
}

std::vector<size_t> sweepSizes(const Options& options) {
  std::vector<size_t> sizes;
  for (size_t s = options.minBytes; s <= options.maxBytes;) {
    sizes.push_back(s);
    if (options.factor < 2 || s > options.maxBytes / options.factor) break;
    s *= options.factor;
  }
  return sizes;
}

std::vector<std::string> toArgs(const Options& o) {
  std::string ops;
  for (OpKind kind : o.ops) ops += (ops.empty() ? "" : ",") + std::string(opInfo(kind).name);
  static constexpr const char* kInPlace[] = {"both", "only", "no"};
  std::vector<std::string> args = {ops,
                                   "-b",
                                   std::to_string(o.minBytes),
                                   "-e",
                                   std::to_string(o.maxBytes),
                                   "-f",
                                   std::to_string(o.factor),
                                   "-d",
                                   typeName(o.type),
                                   "-o",
                                   redOpName(o.redop),
                                   "-r",
                                   std::to_string(o.root),
                                   "-w",
                                   std::to_string(o.warmup),
                                   "-n",
                                   std::to_string(o.iters),
                                   "-g",
                                   std::to_string(o.gpus),
                                   "-c",
                                   o.check ? "1" : "0",
                                   "--inplace",
                                   kInPlace[static_cast<int>(o.inPlace)],
                                   "--gemm-size",
                                   std::to_string(o.gemmSize)};
  if (o.overlap) args.push_back("--overlap");
  if (o.overlapNothing) args.push_back("--overlap-nothing");
  if (o.window) args.push_back("--window");
  if (!o.lib.empty()) args.insert(args.end(), {"--lib", o.lib});
  if (!o.jsonOut.empty()) args.insert(args.end(), {"--json-out", o.jsonOut});
  if (o.seedSet) args.insert(args.end(), {"--seed", std::to_string(o.seed)});
  return args;
}

const char* usageText() {
  return "usage: ferry-bench <op>[,<op>...|all] [options]\n"
         "ops: all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather "
         "scatter\n"
         "  -b, -e SIZE       min/max bytes (K/M/G suffixes; default 8 .. 128M)\n"
         "  -f N              size multiplication factor (default 2)\n"
         "  -d TYPE           int8 uint8 int32 uint32 int64 uint64 half float double bfloat16\n"
         "                    fp8e4m3 fp8e5m2 (default float)\n"
         "  -o REDOP          sum prod max min avg (default sum)\n"
         "  -r ROOT           root rank of rooted ops (default 0)\n"
         "  -w N, -n N        warmup / timed iterations (default 5 / 20)\n"
         "  -g N              devices driven by this process (ncclCommInitAll / grouped init)\n"
         "  -c 0|1            check results (default 1)\n"
         "  --inplace M       only|no|both (default both)\n"
         "  --lib PATH        libnccl.so.2 to load (default: the loader's libnccl.so.2)\n"
         "  --compare PATH    also run PATH, print both and their ratios\n"
         "  --rounds R        with --compare: run both R times in turn (A B A B ...), report\n"
         "                    each row's median round (default 1)\n"
         "  --json FILE       machine-readable results (rank 0)\n"
         "  --overlap         measure against a concurrent cuBLAS bf16 GEMM (CUDA only)\n"
         "  --overlap-nothing as --overlap, but nothing runs beside the GEMMs in the shared\n"
         "                    window: the measurement's own bias, a control for --overlap\n"
         "  --gemm-size N     GEMM M=N=K (default 8192)\n"
         "  --window          buffers from ncclMemAlloc, registered as symmetric windows\n"
         "  --seed N          data seed (default: derived from NCCL_COMM_ID, or time^pid)\n"
         "Ranks: ferry-run -n N ferry-bench ... (one device each), or -g N in one process.\n"
         "Exit: 0 ok, 1 a data check failed or a run broke, 2 usage or setup error.\n";
}

}  // namespace ferry::bench
