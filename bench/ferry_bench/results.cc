#include "ferry_bench/results.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace ferry::bench {
namespace {

// Free text (paths, error strings) goes last on its line; newlines become spaces.
std::string oneLine(std::string s) {
  for (char& c : s) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return s;
}

std::string restOfLine(std::istringstream& in) {
  std::string rest;
  std::getline(in, rest);
  if (!rest.empty() && rest[0] == ' ') rest.erase(0, 1);
  return rest;
}

void writeMeasure(std::ostringstream& out, const Measure& m) {
  out << ' ' << m.ran << ' ' << m.timeUs << ' ' << m.algBw << ' ' << m.busBw << ' ' << m.wrong;
}

bool readMeasure(std::istringstream& in, Measure* m) {
  return static_cast<bool>(in >> m->ran >> m->timeUs >> m->algBw >> m->busBw >> m->wrong);
}

// A count, then that many values (at most kMaxRanks: a bad count is an
// error, not an allocation).
bool readDoubles(std::istringstream& in, std::vector<double>* v) {
  constexpr size_t kMaxRanks = 1 << 20;
  size_t n = 0;
  if (!(in >> n) || n > kMaxRanks) return false;
  v->assign(n, 0);
  for (double& x : *v) {
    if (!(in >> x)) return false;
  }
  return true;
}

}  // namespace

std::string serializeResult(const RunResult& r) {
  std::ostringstream out;
  out.precision(17);
  out << "ferry-bench-result 1\n";
  out << "version " << r.version << "\nnranks " << r.nranks << "\nwrong " << r.wrongTotal << "\n";
  out << "runtime " << oneLine(r.runtime) << "\ntype " << oneLine(r.type) << "\nredop "
      << oneLine(r.redop) << "\nlib " << oneLine(r.lib) << "\n";
  for (const OpResult& op : r.ops) {
    out << "op " << static_cast<int>(op.kind) << ' ' << op.supported << ' ' << op.failed << ' '
        << op.root << ' ' << oneLine(op.error) << "\n";
    for (const SizeRow& row : op.rows) {
      out << "row " << row.bytes << ' ' << row.count;
      writeMeasure(out, row.oop);
      writeMeasure(out, row.ip);
      const OverlapMeasure& o = row.overlap;
      out << ' ' << o.ran << ' ' << o.gemmTflopsAlone << ' ' << o.gemmTflopsUnder << ' '
          << o.busBwUnderGemm << ' ' << o.rankSlowdowns.size();
      for (double x : o.rankSlowdowns) out << ' ' << x;
      out << "\n";
    }
  }
  out << "end\n";
  return out.str();
}

bool parseResult(const std::string& text, RunResult* result, std::string* error) {
  std::istringstream lines(text);
  std::string line;
  RunResult r;
  bool header = false, end = false;
  int lineNo = 0;
  while (std::getline(lines, line)) {
    ++lineNo;
    std::istringstream in(line);
    std::string key;
    in >> key;
    bool ok = true;
    if (key == "ferry-bench-result")
      header = true;
    else if (key == "version")
      ok = static_cast<bool>(in >> r.version);
    else if (key == "nranks")
      ok = static_cast<bool>(in >> r.nranks);
    else if (key == "wrong")
      ok = static_cast<bool>(in >> r.wrongTotal);
    else if (key == "runtime")
      r.runtime = restOfLine(in);
    else if (key == "type")
      r.type = restOfLine(in);
    else if (key == "redop")
      r.redop = restOfLine(in);
    else if (key == "lib")
      r.lib = restOfLine(in);
    else if (key == "op") {
      OpResult op;
      int kind = -1;
      ok = static_cast<bool>(in >> kind >> op.supported >> op.failed >> op.root) && kind >= 0 &&
           kind < kOpCount;
      op.kind = static_cast<OpKind>(kind);
      op.error = restOfLine(in);
      r.ops.push_back(op);
    } else if (key == "row") {
      SizeRow row;
      OverlapMeasure& o = row.overlap;
      ok = !r.ops.empty() && static_cast<bool>(in >> row.bytes >> row.count) &&
           readMeasure(in, &row.oop) && readMeasure(in, &row.ip) &&
           static_cast<bool>(in >> o.ran >> o.gemmTflopsAlone >> o.gemmTflopsUnder >>
                             o.busBwUnderGemm) &&
           readDoubles(in, &o.rankSlowdowns);
      if (ok) r.ops.back().rows.push_back(row);
    } else if (key == "end")
      end = true;
    else
      ok = key.empty();
    if (!ok) {
      *error = "bad result line " + std::to_string(lineNo) + ": " + line;
      return false;
    }
  }
  if (!header || !end) {
    *error = header ? "truncated result (no end line)" : "not a ferry-bench result";
    return false;
  }
  *result = r;
  return true;
}

namespace {

// The measure of median time among those that ran, wrong = the worst.
Measure medianMeasure(std::vector<const Measure*> ms) {
  std::sort(ms.begin(), ms.end(),
            [](const Measure* a, const Measure* b) { return a->timeUs < b->timeUs; });
  Measure m = *ms[(ms.size() - 1) / 2];
  for (const Measure* x : ms) m.wrong = std::max(m.wrong, x->wrong);
  return m;
}

double medianOf(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[(v.size() - 1) / 2];
}

const SizeRow* findRow(const RunResult& r, size_t op, OpKind kind, size_t bytes) {
  if (op >= r.ops.size() || r.ops[op].kind != kind) return nullptr;
  for (const SizeRow& row : r.ops[op].rows) {
    if (row.bytes == bytes) return &row;
  }
  return nullptr;
}

// Each rank's median slowdown over the rounds, and the worst of those as
// the row's: the median of each round's worst would charge every round's
// luckier rank's noise upward (two ranks, each +-3% a round). Only when
// every round knows every rank; else the median round's own worst stays.
void worstRankMedian(const std::vector<OverlapMeasure>& rounds, OverlapMeasure* out) {
  const size_t n = rounds[0].rankSlowdowns.size();
  if (n == 0) return;
  for (const OverlapMeasure& o : rounds) {
    if (o.rankSlowdowns.size() != n) return;
  }
  std::vector<double> medians(n);
  double worst = 0;
  for (size_t k = 0; k < n; ++k) {
    std::vector<double> v;
    for (const OverlapMeasure& o : rounds) {
      if (o.rankSlowdowns[k] > 0) v.push_back(o.rankSlowdowns[k]);
    }
    medians[k] = v.empty() ? 0 : medianOf(v);
    worst = std::max(worst, medians[k]);
  }
  out->rankSlowdowns = medians;
  if (worst > 0) out->gemmTflopsUnder = out->gemmTflopsAlone / worst;
}

void mergeRow(const std::vector<RunResult>& runs, size_t op, OpKind kind, SizeRow* row) {
  std::vector<const Measure*> oop, ip;
  std::vector<OverlapMeasure> overlaps;
  std::vector<double> busBw;
  for (const RunResult& r : runs) {
    const SizeRow* x = findRow(r, op, kind, row->bytes);
    if (x == nullptr) continue;
    if (x->oop.ran) oop.push_back(&x->oop);
    if (x->ip.ran) ip.push_back(&x->ip);
    if (x->overlap.ran) {
      overlaps.push_back(x->overlap);
      busBw.push_back(x->overlap.busBwUnderGemm);
    }
  }
  if (!oop.empty()) row->oop = medianMeasure(oop);
  if (!ip.empty()) row->ip = medianMeasure(ip);
  if (!overlaps.empty()) {
    // The round with the median slowdown, its own reference beside it (each
    // round's GEMMs alone were timed next to its GEMMs under traffic).
    const auto slowdown = [](const OverlapMeasure& o) {
      return o.gemmTflopsUnder > 0 ? o.gemmTflopsAlone / o.gemmTflopsUnder : 0;
    };
    std::sort(overlaps.begin(), overlaps.end(),
              [&](const OverlapMeasure& a, const OverlapMeasure& b) {
                return slowdown(a) < slowdown(b);
              });
    row->overlap = overlaps[overlaps.size() / 2];
    row->overlap.busBwUnderGemm = medianOf(busBw);
    worstRankMedian(overlaps, &row->overlap);
  }
}

}  // namespace

RunResult medianOfRounds(const std::vector<RunResult>& runs) {
  if (runs.empty()) return RunResult{};
  RunResult out = runs[0];
  for (const RunResult& r : runs) out.wrongTotal = std::max(out.wrongTotal, r.wrongTotal);
  for (size_t i = 0; i < out.ops.size(); ++i) {
    OpResult& op = out.ops[i];
    for (const RunResult& r : runs) {
      if (i < r.ops.size() && r.ops[i].kind == op.kind && r.ops[i].failed && !op.failed) {
        op.failed = true;
        op.error = r.ops[i].error;
      }
    }
    for (SizeRow& row : op.rows) mergeRow(runs, i, op.kind, &row);
  }
  return out;
}

}  // namespace ferry::bench
