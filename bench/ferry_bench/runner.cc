#include "ferry_bench/runner.h"

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "ferry_bench/device.h"
#include "ferry_bench/element.h"
#include "ferry_bench/launch.h"
#include "ferry_bench/nccl_lib.h"
#include "ferry_bench/overlap.h"

namespace ferry::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Communicators, destroyed with the run.
struct CommSet {
  const NcclLib* lib = nullptr;
  std::vector<ncclComm_t> comms;
  ~CommSet() {
    for (ncclComm_t c : comms) {
      if (c != nullptr) lib->commDestroy(c);
    }
  }
};

struct Context {
  const Options& opt;
  const LaunchEnv& env;
  NcclLib lib;
  Backend backend = Backend::Host;
  std::vector<Device> devices;
  std::vector<int> commRanks;  // comm rank of each device's communicator
  int nranks = 1;
  CommSet comms;
  std::vector<Stream> streams;
  std::unique_ptr<GemmLoop> gemm;
  uint64_t seed = 0;
  bool reporter = true;  // prints the table: process rank 0
  Clock::time_point start = Clock::now(), lastProgress = Clock::now();
};

// A registered window, deregistered with the buffers' lifetime (before
// they are freed: declared after them in OpBuffers).
struct WindowReg {
  const NcclLib* lib = nullptr;
  ncclComm_t comm = nullptr;
  ncclWindow_t win = nullptr;
  WindowReg(const NcclLib* l, ncclComm_t c, ncclWindow_t w) : lib(l), comm(c), win(w) {}
  WindowReg(const WindowReg&) = delete;
  WindowReg& operator=(const WindowReg&) = delete;
  WindowReg(WindowReg&& o) noexcept : lib(o.lib), comm(o.comm), win(o.win) { o.win = nullptr; }
  ~WindowReg() {
    if (win != nullptr) lib->windowDeregister(comm, win);
  }
};

// A buffer pair per device, sized for the largest size of the sweep.
struct OpBuffers {
  std::vector<DeviceBuffer> send, recv;
  std::vector<WindowReg> windows;  // --window
};

// Where one device's send and receive data live for one placement.
struct Placement {
  DeviceBuffer* sendBuf = nullptr;
  size_t sendOff = 0;  // bytes
  DeviceBuffer* recvBuf = nullptr;
  size_t recvOff = 0;
  const void* send() const { return sendBuf->data() + sendOff; }
  void* recv() const { return recvBuf->data() + recvOff; }
};

uint64_t hashSeed(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  uint64_t x = seed ^ (a << 56) ^ (b << 32) ^ (c << 24);
  x = (x ^ (x >> 31)) * 0x7fb5d329728ea185ull;
  x = (x ^ (x >> 27)) * 0x81dadef4bc2dd44dull;
  return x ^ (x >> 33);
}

bool setupDevices(Context& ctx, std::string* error) {
  std::string why;
  ctx.backend = chooseBackend(&why);
  if (ctx.backend == Backend::Host && !ctx.lib.hasFerryStreams()) {
    *error = "the host runtime (" + why + ") needs Ferry's library: " + ctx.lib.path +
             " has no ncclFerryStream* functions";
    return false;
  }
  const int g = ctx.opt.gpus;
  for (int i = 0; i < g; ++i) {
    Device d;
    d.backend = ctx.backend;
    d.lib = &ctx.lib;
    if (!ctx.env.launched())
      d.index = i;
    else if (g == 1 && ctx.env.device >= 0)
      d.index = ctx.env.device;
    else
      d.index = ctx.env.localRank * g + i;
    ctx.devices.push_back(d);
    ctx.commRanks.push_back(ctx.env.rank * g + i);
  }
  ctx.nranks = ctx.env.world * g;
  if (ctx.opt.overlap && g != 1) {
    *error = "--overlap drives one device per process (use ferry-run, not -g)";
    return false;
  }
  return true;
}

bool setupComms(Context& ctx, std::string* error) {
  const NcclLib& lib = ctx.lib;
  const size_t g = ctx.devices.size();
  ctx.comms.lib = &lib;
  ctx.comms.comms.assign(g, nullptr);
  ncclResult_t r;
  if (!ctx.env.launched()) {
    std::vector<int> list;
    for (const Device& d : ctx.devices) list.push_back(d.index);
    r = lib.commInitAll(ctx.comms.comms.data(), static_cast<int>(g), list.data());
  } else {
    // Every process gets the same id from NCCL_COMM_ID; comm rank 0 hosts the root.
    ncclUniqueId id;
    r = lib.getUniqueId(&id);
    if (r == ncclSuccess) r = lib.groupStart();
    for (size_t i = 0; r == ncclSuccess && i < g; ++i) {
      if (!ctx.devices[i].select(error)) return false;
      r = lib.commInitRank(&ctx.comms.comms[i], ctx.nranks, id, ctx.commRanks[i]);
    }
    const ncclResult_t ended = g > 0 ? lib.groupEnd() : ncclSuccess;
    if (r == ncclSuccess) r = ended;
  }
  if (r != ncclSuccess) {
    *error = "communicator init failed: " + lib.errorText(r, nullptr);
    return false;
  }
  ctx.streams.resize(g);
  for (size_t i = 0; i < g; ++i) {
    if (!ctx.streams[i].create(ctx.devices[i], error)) return false;
  }
  return true;
}

// --window: every device's two buffers become NCCL_WIN_COLL_SYMMETRIC
// windows of its communicator. Registration is collective: one group
// spans the communicators this process drives (-g), as for init. Sizes are
// the same on every rank (the sweep's largest shape).
bool registerWindows(Context& ctx, OpBuffers* bufs, std::string* error) {
  const NcclLib& lib = ctx.lib;
  std::vector<ncclWindow_t> wins(2 * ctx.devices.size(), nullptr);
  ncclResult_t r = lib.groupStart();
  for (size_t i = 0; r == ncclSuccess && i < ctx.devices.size(); ++i) {
    for (int k = 0; r == ncclSuccess && k < 2; ++k) {
      DeviceBuffer& b = k == 0 ? bufs->send[i] : bufs->recv[i];
      if (!ctx.devices[i].select(error)) return false;
      r = lib.windowRegister(ctx.comms.comms[i], b.data(), std::max<size_t>(b.size(), 1),
                             &wins[2 * i + k], NCCL_WIN_COLL_SYMMETRIC);
    }
  }
  const ncclResult_t e = lib.groupEnd();
  if (r == ncclSuccess) r = e;
  for (size_t i = 0; i < wins.size(); ++i) {
    if (wins[i] != nullptr) bufs->windows.emplace_back(&ctx.lib, ctx.comms.comms[i / 2], wins[i]);
  }
  if (r != ncclSuccess) {
    *error = "ncclCommWindowRegister: " + lib.errorText(r, ctx.comms.comms[0]);
    return false;
  }
  return true;
}

bool allocateBuffers(Context& ctx, OpKind kind, OpBuffers* bufs, std::string* error) {
  const size_t es = typeSize(ctx.opt.type);
  const Shape max = shapeFor(kind, ctx.opt.maxBytes, es, ctx.nranks, 0);
  bufs->send.resize(ctx.devices.size());
  bufs->recv.resize(ctx.devices.size());
  for (size_t i = 0; i < ctx.devices.size(); ++i) {
    DeviceBuffer& s = bufs->send[i];
    DeviceBuffer& r = bufs->recv[i];
    const bool ok = ctx.opt.window
                        ? s.allocateFromLib(ctx.devices[i], max.sendCount * es, error) &&
                              r.allocateFromLib(ctx.devices[i], max.recvCount * es, error)
                        : s.allocate(ctx.devices[i], max.sendCount * es, error) &&
                              r.allocate(ctx.devices[i], max.recvCount * es, error);
    if (!ok) return false;
  }
  return !ctx.opt.window || registerWindows(ctx, bufs, error);
}

// In-place: the op's larger buffer holds both; the smaller side sits at its
// in-place offset (nccl-tests' layout).
Placement placementFor(const Shape& s, size_t es, OpBuffers& bufs, size_t dev, bool inPlace) {
  Placement p{&bufs.send[dev], 0, &bufs.recv[dev], 0};
  if (!inPlace) return p;
  if (s.recvCount >= s.sendCount) {
    p.sendBuf = &bufs.recv[dev];
    p.sendOff = s.sendInplaceOffset * es;
  } else {
    p.recvBuf = &bufs.send[dev];
    p.recvOff = s.recvInplaceOffset * es;
  }
  return p;
}

ncclResult_t launchAll(Context& ctx, const OpCase& op, const std::vector<Shape>& shapes,
                       const std::vector<Placement>& where) {
  const bool group = ctx.devices.size() > 1;
  ncclResult_t r = group ? ctx.lib.groupStart() : ncclSuccess;
  for (size_t i = 0; r == ncclSuccess && i < ctx.devices.size(); ++i) {
    r = launchOp(ctx.lib, op, shapes[i], where[i].send(), where[i].recv(), ctx.commRanks[i],
                 ctx.comms.comms[i], ctx.streams[i].get());
  }
  if (group) {
    const ncclResult_t ended = ctx.lib.groupEnd();
    if (r == ncclSuccess) r = ended;
  }
  return r;
}

bool syncAll(Context& ctx, std::string* error) {
  for (const Stream& s : ctx.streams) {
    if (!s.synchronize(error)) return false;
  }
  return true;
}

// Fresh inputs, poisoned outputs, one launch, element-wise comparison.
// *launched is false when the library refused the call (error set).
bool checkPlacement(Context& ctx, const OpCase& op, const std::vector<Shape>& shapes,
                    const std::vector<Placement>& where, const DataGen& gen, int64_t* wrong,
                    bool* launched, std::string* error) {
  const size_t es = typeSize(op.type);
  const InputFn input = [&gen](int r, size_t i) { return inputBits(gen, r, i); };
  for (size_t d = 0; d < ctx.devices.size(); ++d) {
    const Shape& s = shapes[d];
    std::vector<char> host(std::max(s.sendCount, s.recvCount) * es);
    for (size_t i = 0; i < s.recvCount; ++i) storeBits(host.data(), i, es, poisonBits(op.type));
    if (!where[d].recvBuf->upload(where[d].recvOff, host.data(), s.recvCount * es, error))
      return false;
    buildInput(op, s, ctx.commRanks[d], input, host.data());
    if (!where[d].sendBuf->upload(where[d].sendOff, host.data(), s.sendCount * es, error))
      return false;
  }
  const ncclResult_t r = launchAll(ctx, op, shapes, where);
  *launched = r == ncclSuccess;
  if (!*launched) {
    *error = ctx.lib.errorText(r, ctx.comms.comms[0]);
    return false;
  }
  if (!syncAll(ctx, error)) return false;
  *wrong = 0;
  const Tolerance tol = toleranceFor(op, gen);
  for (size_t d = 0; d < ctx.devices.size(); ++d) {
    const Shape& s = shapes[d];
    std::vector<char> got(s.recvCount * es), want(s.recvCount * es);
    if (!buildExpected(op, s, ctx.commRanks[d], input, want.data())) continue;
    if (!where[d].recvBuf->download(where[d].recvOff, got.data(), got.size(), error)) return false;
    size_t first = 0;
    const size_t bad = countWrong(got.data(), want.data(), s.recvCount, op.type, tol, &first);
    if (bad > 0) {
      fprintf(stderr, "# rank %d: %s %zu B: %zu wrong elements, first at %zu (got %g, want %g)\n",
              ctx.commRanks[d], opInfo(op.kind).name, s.bytes, bad, first,
              bitsToDouble(loadBits(got.data(), first, es), op.type),
              bitsToDouble(loadBits(want.data(), first, es), op.type));
    }
    *wrong += static_cast<int64_t>(bad);
  }
  return true;
}

// Launches `count` times and waits; *launched as in checkPlacement.
bool launchMany(Context& ctx, const OpCase& op, const std::vector<Shape>& shapes,
                const std::vector<Placement>& where, int count, bool* launched,
                std::string* error) {
  for (int i = 0; i < count; ++i) {
    const ncclResult_t r = launchAll(ctx, op, shapes, where);
    *launched = r == ncclSuccess;
    if (!*launched) {
      *error = ctx.lib.errorText(r, ctx.comms.comms[0]);
      return false;
    }
  }
  return true;
}

// Lines every rank up before a timed loop: a one-byte in-place all-reduce
// on each device's larger buffer, then a sync. The warm-up launches do not
// do that for one-directional ops (broadcast, reduce): a sender may
// run as many launches ahead as its peer's FIFO holds, so a rank that spent
// longer verifying (the root of a reduce) starts timing late and its peer's
// times include the wait (measured: broadcast and reduce times 4-30x too
// long, on one root only). Best effort: a library that refuses it is timed
// without.
void lineUpRanks(Context& ctx, const std::vector<Placement>& where) {
  const bool group = ctx.devices.size() > 1;
  ncclResult_t r = group ? ctx.lib.groupStart() : ncclSuccess;
  for (size_t i = 0; r == ncclSuccess && i < ctx.devices.size(); ++i) {
    DeviceBuffer* b =
        where[i].recvBuf->size() >= where[i].sendBuf->size() ? where[i].recvBuf : where[i].sendBuf;
    if (b->size() == 0) continue;
    r = ctx.lib.allReduce(b->data(), b->data(), 1, ncclInt8, ncclMax, ctx.comms.comms[i],
                          ctx.streams[i].get());
  }
  if (group) (void)ctx.lib.groupEnd();
  std::string ignored;
  (void)syncAll(ctx, &ignored);
}

bool timePlacement(Context& ctx, const OpCase& op, const std::vector<Shape>& shapes,
                   const std::vector<Placement>& where, Measure* m, bool* launched,
                   std::string* error) {
  std::vector<const Stream*> streams;
  for (const Stream& s : ctx.streams) streams.push_back(&s);
  StreamTimer timer;
  if (!launchMany(ctx, op, shapes, where, ctx.opt.warmup, launched, error) ||
      !syncAll(ctx, error)) {
    return false;
  }
  lineUpRanks(ctx, where);
  if (!timer.init(ctx.devices, streams, error) || !timer.start(error) ||
      !launchMany(ctx, op, shapes, where, ctx.opt.iters, launched, error) || !timer.stop(error)) {
    return false;
  }
  const double sec = timer.maxSeconds() / ctx.opt.iters;
  m->timeUs = sec * 1e6;
  m->algBw = sec > 0 ? static_cast<double>(shapes[0].count * typeSize(op.type)) / 1e9 / sec : 0;
  m->busBw = m->algBw * busFactor(op.kind, ctx.nranks);
  return true;
}

// The overlap sample of the rank whose GEMM lost the most, on every rank:
// each process times the GEMM on its first GPU only, and the ranks need not
// lose alike (2x H100, torch's all-to-all: x1.009 on one rank, x1.071 on
// the other), so rank 0's own sample would hide the worse one. Each rank's
// slowdown and traffic time go through the library's own all-gather (in
// float: the bench's one shared channel), after the timed loop; the
// report lists them under the row (results.cc folds rounds per rank).
bool worstRankSample(Context& ctx, OverlapSample* s, std::string* error) {
  const double slowdown = s->gemmTflopsUnder > 0 ? s->gemmTflopsAlone / s->gemmTflopsUnder : 0;
  const size_t n = static_cast<size_t>(ctx.nranks);
  std::vector<DeviceBuffer> mine(ctx.devices.size()), all(ctx.devices.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    // Other GPUs of this process ran no GEMM: zeros lose every max.
    const float v[2] = {i == 0 ? static_cast<float>(slowdown) : 0.f,
                        i == 0 ? static_cast<float>(s->trafficSecondsPerIter * 1e6) : 0.f};
    if (!mine[i].allocate(ctx.devices[i], sizeof v, error) ||
        !mine[i].upload(0, v, sizeof v, error) ||
        !all[i].allocate(ctx.devices[i], n * sizeof v, error)) {
      return false;
    }
  }
  const bool group = ctx.devices.size() > 1;
  ncclResult_t r = group ? ctx.lib.groupStart() : ncclSuccess;
  for (size_t i = 0; r == ncclSuccess && i < mine.size(); ++i) {
    r = ctx.lib.allGather(mine[i].data(), all[i].data(), 2, ncclFloat32, ctx.comms.comms[i],
                          ctx.streams[i].get());
  }
  if (group) {
    const ncclResult_t e = ctx.lib.groupEnd();
    if (r == ncclSuccess) r = e;
  }
  if (r != ncclSuccess) {
    *error = "gathering the ranks' GEMM slowdowns: " + ctx.lib.errorText(r, ctx.comms.comms[0]);
    return false;
  }
  std::vector<float> v(2 * n);
  if (!syncAll(ctx, error) || !all[0].download(0, v.data(), v.size() * sizeof(float), error)) {
    return false;
  }
  float worst = 0, slowestUs = 0;
  s->rankSlowdowns.assign(n, 0);
  for (size_t k = 0; k < n; ++k) {
    s->rankSlowdowns[k] = v[2 * k];
    worst = std::max(worst, v[2 * k]);
    slowestUs = std::max(slowestUs, v[2 * k + 1]);
  }
  if (worst > 0) s->gemmTflopsUnder = s->gemmTflopsAlone / worst;
  s->trafficSecondsPerIter = slowestUs / 1e6;
  return true;
}

bool measureOverlap(Context& ctx, const OpCase& op, const std::vector<Shape>& shapes,
                    const std::vector<Placement>& where, const Measure& alone, OverlapMeasure* o,
                    std::string* error) {
  const auto launch = [&](std::string* err) {
    if (ctx.opt.overlapNothing) return true;  // the control: GEMMs beside nothing
    const ncclResult_t r = launchAll(ctx, op, shapes, where);
    if (r != ncclSuccess) *err = ctx.lib.errorText(r, ctx.comms.comms[0]);
    return r == ncclSuccess;
  };
  OverlapSample sample;
  // Lined up as the timed loop is: a rank whose GEMMs alone ended later
  // would otherwise reach every exchange late (SM-free sends then miss their
  // push waits and one GPU copies both directions).
  const auto lineUp = [&] { lineUpRanks(ctx, where); };
  if (!ctx.gemm->measureUnderTraffic(ctx.streams[0], ctx.opt.iters, alone.timeUs / 1e6, launch,
                                     &sample, error, lineUp) ||
      !worstRankSample(ctx, &sample, error)) {
    return false;
  }
  o->ran = true;
  o->gemmTflopsAlone = sample.gemmTflopsAlone;
  o->gemmTflopsUnder = sample.gemmTflopsUnder;
  o->rankSlowdowns = sample.rankSlowdowns;
  const double sec = sample.trafficSecondsPerIter;
  const double algBw =
      sec > 0 ? static_cast<double>(shapes[0].count * typeSize(op.type)) / 1e9 / sec : 0;
  o->busBwUnderGemm = algBw * busFactor(op.kind, ctx.nranks);
  return true;
}

enum class Outcome { Ok, Refused, Failed };

bool placementSelected(const Options& opt, const OpInfo& info, bool inPlace) {
  if (inPlace) return info.inPlace && opt.inPlace != InPlaceMode::No;
  return opt.inPlace != InPlaceMode::Only;
}

Outcome runPlacement(Context& ctx, const OpCase& op, size_t bytes, uint64_t caseSeed,
                     OpBuffers& bufs, bool inPlace, SizeRow* row, std::string* error) {
  const size_t es = typeSize(op.type);
  std::vector<Shape> shapes;
  std::vector<Placement> where;
  for (size_t d = 0; d < ctx.devices.size(); ++d) {
    shapes.push_back(shapeFor(op.kind, bytes, es, ctx.nranks, ctx.commRanks[d]));
    where.push_back(placementFor(shapes.back(), es, bufs, d, inPlace));
  }
  Measure& m = inPlace ? row->ip : row->oop;
  bool launched = true;
  if (ctx.opt.check) {
    const DataGen gen = makeDataGen(op, caseSeed);
    if (!checkPlacement(ctx, op, shapes, where, gen, &m.wrong, &launched, error)) {
      return launched ? Outcome::Failed : Outcome::Refused;
    }
  }
  if (!timePlacement(ctx, op, shapes, where, &m, &launched, error)) {
    return launched ? Outcome::Failed : Outcome::Refused;
  }
  m.ran = true;
  if (!inPlace && ctx.gemm != nullptr &&
      !measureOverlap(ctx, op, shapes, where, m, &row->overlap, error)) {
    return Outcome::Failed;
  }
  return Outcome::Ok;
}

void progress(Context& ctx, const OpInfo& info, size_t bytes, size_t index, size_t total) {
  const Clock::time_point now = Clock::now();
  constexpr auto kEvery = std::chrono::seconds(5);
  if (!ctx.reporter || now - ctx.lastProgress < kEvery) return;
  ctx.lastProgress = now;
  fprintf(stderr, "# progress: %s %zu B (%zu/%zu), %.0f s\n", info.name, bytes, index + 1, total,
          std::chrono::duration<double>(now - ctx.start).count());
}

OpResult runOp(Context& ctx, OpKind kind, std::string* setupError) {
  const OpInfo& info = opInfo(kind);
  OpResult result;
  result.kind = kind;
  result.root = info.rooted ? ctx.opt.root : -1;
  const OpCase op{kind, ctx.opt.type, ctx.opt.redop, ctx.opt.root, ctx.nranks};
  OpBuffers bufs;
  if (!allocateBuffers(ctx, kind, &bufs, setupError)) {
    result.failed = true;
    result.error = *setupError;
    return result;
  }
  const std::vector<size_t> sizes = sweepSizes(ctx.opt);
  const size_t es = typeSize(op.type);
  bool first = true;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const Shape shape = shapeFor(kind, sizes[i], es, ctx.nranks, 0);
    if (shape.paramCount == 0) continue;  // fewer elements than ranks
    progress(ctx, info, sizes[i], i, sizes.size());
    SizeRow row;
    row.bytes = shape.bytes;
    row.count = shape.count;
    for (int p = 0; p < 2; ++p) {
      if (!placementSelected(ctx.opt, info, p == 1)) continue;
      const uint64_t caseSeed = hashSeed(ctx.seed, static_cast<uint64_t>(kind), i, p);
      std::string error;
      const Outcome out = runPlacement(ctx, op, sizes[i], caseSeed, bufs, p == 1, &row, &error);
      if (out == Outcome::Ok) continue;
      if (out == Outcome::Refused && first) {
        result.supported = false;
      } else {
        result.failed = true;
        error = std::string(p == 1 ? "in-place" : "out-of-place") + " at " +
                std::to_string(shape.bytes) + " B: " + error;
      }
      result.error = error;
      return result;
    }
    first = false;
    result.rows.push_back(row);
  }
  return result;
}

bool setupOverlap(Context& ctx, std::string* error) {
  if (!ctx.opt.overlap) return true;
  ctx.gemm = std::make_unique<GemmLoop>();
  double warm = 0;  // also sets the GEMM's duration that sizes each measurement
  return ctx.gemm->init(ctx.devices[0], ctx.opt.gemmSize, error) &&
         ctx.gemm->measureAlone(&warm, error);
}

}  // namespace

int runSweep(const Options& options, const LaunchEnv& env, const std::string& libPath,
             uint64_t seed, RunResult* result) {
  Context ctx{options, env};
  ctx.seed = seed;
  ctx.reporter = env.rank == 0;
  std::string error;
  if (!loadNcclLib(libPath, &ctx.lib, &error) || !setupDevices(ctx, &error)) {
    fprintf(stderr, "ferry-bench: %s\n", error.c_str());
    return kExitSetup;
  }
  if (options.root >= ctx.nranks) {
    fprintf(stderr, "ferry-bench: root %d is not a rank (%d ranks)\n", options.root, ctx.nranks);
    return kExitSetup;
  }
  if (!setupComms(ctx, &error) || !setupOverlap(ctx, &error)) {
    fprintf(stderr, "ferry-bench: %s: %s\n", libPath.c_str(), error.c_str());
    return kExitSetup;
  }
  result->lib = libPath;
  ctx.lib.getVersion(&result->version);
  result->nranks = ctx.nranks;
  result->runtime = backendName(ctx.backend);
  result->type = typeName(options.type);
  result->redop = redOpName(options.redop);
  int code = kExitOk;
  for (OpKind kind : options.ops) {
    result->ops.push_back(runOp(ctx, kind, &error));
    const OpResult& op = result->ops.back();
    for (const SizeRow& row : op.rows) {
      result->wrongTotal +=
          std::max<int64_t>(row.oop.wrong, 0) + std::max<int64_t>(row.ip.wrong, 0);
    }
    if (op.failed) {
      fprintf(stderr, "# rank %d: %s failed: %s\n", env.rank, opInfo(kind).name, op.error.c_str());
      code = kExitWrong;
    }
  }
  if (result->wrongTotal > 0) code = kExitWrong;
  return code;
}

}  // namespace ferry::bench
