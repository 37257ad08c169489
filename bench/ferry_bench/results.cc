#include "ferry_bench/results.h"

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
          << o.busBwUnderGemm << "\n";
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
                             o.busBwUnderGemm);
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

}  // namespace ferry::bench
