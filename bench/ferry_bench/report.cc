#include "ferry_bench/report.h"

#include <cinttypes>
#include <cstring>

#include "ferry_bench/ops.h"

namespace ferry::bench {
namespace {

void printMeasure(FILE* out, const Measure& m) {
  if (!m.ran) {
    fprintf(out, "  %9s %7s %7s %6s", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  char wrong[32];
  if (m.wrong < 0)
    snprintf(wrong, sizeof(wrong), "N/A");
  else
    snprintf(wrong, sizeof(wrong), "%" PRId64, m.wrong);
  fprintf(out, "  %9.2f %7.2f %7.2f %6s", m.timeUs, m.algBw, m.busBw, wrong);
}

void printHeader(FILE* out, bool overlap) {
  fprintf(out, "#%61s%-35s%s\n", "", "out-of-place", "in-place");
  fprintf(out, "# %11s  %12s  %8s  %6s  %6s  %9s %7s %7s %6s  %9s %7s %7s %6s", "size", "count",
          "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
          "#wrong");
  if (overlap) fprintf(out, "  %9s %9s %8s %9s", "gemm", "gemm+comm", "slowdown", "busbw+gemm");
  fprintf(out, "\n# %11s  %12s  %8s  %6s  %6s  %9s %7s %7s %6s  %9s %7s %7s %6s", "(B)",
          "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
  if (overlap) fprintf(out, "  %9s %9s %8s %9s", "(TFLOP/s)", "(TFLOP/s)", "(x)", "(GB/s)");
  fprintf(out, "\n");
}

const char* redopColumn(const RunResult& run, const OpResult& op) {
  return opInfo(op.kind).reduces ? run.redop.c_str() : "none";
}

void printOpStatus(FILE* out, const RunResult& run, const OpResult& op) {
  if (!op.supported) {
    fprintf(out, "# %s: not supported by %s (%s)\n", opInfo(op.kind).name, run.lib.c_str(),
            op.error.c_str());
  } else if (op.failed) {
    fprintf(out, "# %s: FAILED with %s (%s)\n", opInfo(op.kind).name, run.lib.c_str(),
            op.error.c_str());
  }
}

void appendMeasureJson(std::string* s, const char* name, const Measure& m) {
  char buf[256];
  snprintf(buf, sizeof(buf),
           "\"%s\":{\"ran\":%s,\"time_us\":%.3f,\"algbw\":%.4f,\"busbw\":%.4f,\"wrong\":%" PRId64
           "}",
           name, m.ran ? "true" : "false", m.timeUs, m.algBw, m.busBw, m.wrong);
  *s += buf;
}

std::string jsonString(const std::string& text) {
  std::string s = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') {
      s += '\\';
      s += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      snprintf(buf, sizeof(buf), "\\u%04x", c);
      s += buf;
    } else {
      s += c;
    }
  }
  return s + "\"";
}

std::string rowJson(const SizeRow& row) {
  std::string s =
      "{\"size\":" + std::to_string(row.bytes) + ",\"count\":" + std::to_string(row.count) + ",";
  appendMeasureJson(&s, "out_of_place", row.oop);
  s += ",";
  appendMeasureJson(&s, "in_place", row.ip);
  if (row.overlap.ran) {
    char buf[256];
    const OverlapMeasure& o = row.overlap;
    snprintf(buf, sizeof(buf),
             ",\"overlap\":{\"gemm_tflops\":%.3f,\"gemm_tflops_under_comm\":%.3f,"
             "\"gemm_slowdown\":%.4f,\"busbw_under_gemm\":%.4f",
             o.gemmTflopsAlone, o.gemmTflopsUnder, ratio(o.gemmTflopsAlone, o.gemmTflopsUnder),
             o.busBwUnderGemm);
    s += buf;
    if (!o.rankSlowdowns.empty()) {
      s += ",\"gemm_slowdown_by_rank\":[";
      for (size_t k = 0; k < o.rankSlowdowns.size(); ++k) {
        snprintf(buf, sizeof(buf), "%s%.4f", k > 0 ? "," : "", o.rankSlowdowns[k]);
        s += buf;
      }
      s += "]";
    }
    s += "}";
  }
  return s + "}";
}

std::string runJson(const RunResult& run) {
  std::string s =
      "{\"lib\":" + jsonString(run.lib) + ",\"version\":" + std::to_string(run.version) +
      ",\"nranks\":" + std::to_string(run.nranks) + ",\"runtime\":" + jsonString(run.runtime) +
      ",\"type\":" + jsonString(run.type) + ",\"redop\":" + jsonString(run.redop) +
      ",\"wrong\":" + std::to_string(run.wrongTotal) + ",\"ops\":[";
  for (size_t i = 0; i < run.ops.size(); ++i) {
    const OpResult& op = run.ops[i];
    s += std::string(i ? "," : "") + "{\"op\":" + jsonString(opInfo(op.kind).name) +
         ",\"supported\":" + (op.supported ? "true" : "false") +
         ",\"failed\":" + (op.failed ? "true" : "false") + ",\"error\":" + jsonString(op.error) +
         ",\"root\":" + std::to_string(op.root) + ",\"rows\":[";
    for (size_t j = 0; j < op.rows.size(); ++j) s += (j ? "," : "") + rowJson(op.rows[j]);
    s += "]}";
  }
  return s + "]}";
}

const SizeRow* findRow(const OpResult& op, size_t bytes) {
  for (const SizeRow& row : op.rows) {
    if (row.bytes == bytes) return &row;
  }
  return nullptr;
}

const OpResult* findOp(const RunResult& run, OpKind kind) {
  for (const OpResult& op : run.ops) {
    if (op.kind == kind) return &op;
  }
  return nullptr;
}

void printRatio(FILE* out, double r) {
  if (r == 0)
    fprintf(out, " %7s", "N/A");
  else
    fprintf(out, " %7.3f", r);
}

void printCompareMeasure(FILE* out, const Measure& a, const Measure& b) {
  if (!a.ran || !b.ran) {
    fprintf(out, "  %9s %9s %7s %7s %7s %7s", "N/A", "N/A", "N/A", "N/A", "N/A", "N/A");
    return;
  }
  fprintf(out, "  %9.2f %9.2f %7.2f %7.2f", a.timeUs, b.timeUs, a.busBw, b.busBw);
  printRatio(out, ratio(a.busBw, b.busBw));
  printRatio(out, ratio(a.timeUs, b.timeUs));
}

}  // namespace

double ratio(double x, double y) {
  return y == 0 ? 0 : x / y;
}

void printRun(FILE* out, const RunResult& run, bool overlap) {
  fprintf(out, "# lib %s (version %d), %d ranks, %s runtime, type %s\n", run.lib.c_str(),
          run.version, run.nranks, run.runtime.c_str(), run.type.c_str());
  for (const OpResult& op : run.ops) {
    fprintf(out, "#\n# %s\n", opInfo(op.kind).name);
    if (!op.rows.empty()) printHeader(out, overlap);
    for (const SizeRow& row : op.rows) {
      fprintf(out, "  %11zu  %12zu  %8s  %6s  %6d", row.bytes, row.count, run.type.c_str(),
              redopColumn(run, op), op.root);
      printMeasure(out, row.oop);
      printMeasure(out, row.ip);
      if (overlap && row.overlap.ran) {
        const OverlapMeasure& o = row.overlap;
        fprintf(out, "  %9.1f %9.1f %8.3f %9.2f", o.gemmTflopsAlone, o.gemmTflopsUnder,
                ratio(o.gemmTflopsAlone, o.gemmTflopsUnder), o.busBwUnderGemm);
      }
      fprintf(out, "\n");
      if (overlap && row.overlap.rankSlowdowns.size() > 1) {
        fprintf(out, "#   %zu B: GEMM slowdown by rank (the slowdown column: the worst)",
                row.bytes);
        for (double x : row.overlap.rankSlowdowns) {
          if (x > 0) {
            fprintf(out, " x%.3f", x);
          } else {
            fprintf(out, " -");  // a rank without a GEMM (another GPU of a process)
          }
        }
        fprintf(out, "\n");
      }
    }
    printOpStatus(out, run, op);
  }
  fprintf(out, "# %s: #wrong total %" PRId64 "\n", run.lib.c_str(), run.wrongTotal);
}

void printComparison(FILE* out, const RunResult& a, const RunResult& b) {
  fprintf(out, "#\n# comparison: A = %s (version %d), B = %s (version %d), %d ranks, %s\n",
          a.lib.c_str(), a.version, b.lib.c_str(), b.version, a.nranks, a.runtime.c_str());
  fprintf(out, "# ratios: busbw A/B (>1: A faster), time A/B (<1: A faster)\n");
  for (const OpResult& opA : a.ops) {
    const OpResult* opB = findOp(b, opA.kind);
    fprintf(out, "#\n# %s\n", opInfo(opA.kind).name);
    if (opB == nullptr || opA.rows.empty() || opB->rows.empty()) {
      fprintf(out, "# %s: no rows to compare (A %s, B %s)\n", opInfo(opA.kind).name,
              opA.supported ? "ran" : "not supported",
              opB != nullptr && opB->supported ? "ran" : "not supported");
      continue;
    }
    fprintf(out, "#%28s%-55s%s\n", "", "out-of-place", "in-place");
    fprintf(out, "# %11s  %12s  %9s %9s %7s %7s %7s %7s  %9s %9s %7s %7s %7s %7s\n", "size",
            "count", "A us", "B us", "A busbw", "B busbw", "bw A/B", "t A/B", "A us", "B us",
            "A busbw", "B busbw", "bw A/B", "t A/B");
    for (const SizeRow& rowA : opA.rows) {
      const SizeRow* rowB = findRow(*opB, rowA.bytes);
      if (rowB == nullptr) continue;
      fprintf(out, "  %11zu  %12zu", rowA.bytes, rowA.count);
      printCompareMeasure(out, rowA.oop, rowB->oop);
      printCompareMeasure(out, rowA.ip, rowB->ip);
      fprintf(out, "\n");
    }
  }
}

std::string resultsJson(const RunResult& a, const RunResult* b) {
  std::string s = "{\"tool\":\"ferry-bench\",\"runs\":[" + runJson(a);
  if (b != nullptr) s += "," + runJson(*b);
  s += "]";
  if (b != nullptr) {
    s += ",\"comparison\":[";
    bool first = true;
    for (const OpResult& opA : a.ops) {
      const OpResult* opB = findOp(*b, opA.kind);
      if (opB == nullptr) continue;
      for (const SizeRow& rowA : opA.rows) {
        const SizeRow* rowB = findRow(*opB, rowA.bytes);
        if (rowB == nullptr) continue;
        char buf[320];
        snprintf(buf, sizeof(buf),
                 "%s{\"op\":\"%s\",\"size\":%zu,\"out_of_place\":{\"busbw_ratio\":%.4f,"
                 "\"time_ratio\":%.4f},\"in_place\":{\"busbw_ratio\":%.4f,\"time_ratio\":%.4f}}",
                 first ? "" : ",", opInfo(opA.kind).name, rowA.bytes,
                 ratio(rowA.oop.busBw, rowB->oop.busBw), ratio(rowA.oop.timeUs, rowB->oop.timeUs),
                 ratio(rowA.ip.busBw, rowB->ip.busBw), ratio(rowA.ip.timeUs, rowB->ip.timeUs));
        s += buf;
        first = false;
      }
    }
    s += "]";
  }
  return s + "}\n";
}

}  // namespace ferry::bench
