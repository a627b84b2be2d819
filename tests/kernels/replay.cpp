// The replay driver's main: reads the case file, runs each record's op on the
// CPU twin and the emulated GPU, reports mismatches, and exits non-zero when
// any record failed. Usage:
//   replay CASES [--ops resize,decode] [--cases-from LIST] [--shared-cases-out LIST] [--self-test]
// LIST: one case name a line (--shared-cases-out adds a tab and the bytes of its inputs).
#include "replay.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace gdsio_emu {

int run_self_tests();  // selftest.cu

namespace {

std::map<std::string, OpFn>& registry() {
  static std::map<std::string, OpFn> r;
  return r;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string cur;
  std::istringstream in(s);
  while (std::getline(in, cur, sep))
    if (!cur.empty()) out.push_back(cur);
  return out;
}

// The case file: `case NAME`, `op OP`, key lines, `blob N KEY` + N raw bytes +
// '\n' (or `same KEY` for bytes already given), `end`.
std::vector<Record> read_cases(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open the case file " + path);
  std::vector<Record> out;
  Record cur;
  std::map<std::string, std::shared_ptr<const std::string>> seen;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> w = split(line, ' ');
    if (w.empty()) continue;
    if (w[0] == "case") {
      cur = Record{};
      cur.name = line.substr(5);
    } else if (w[0] == "op") {
      cur.op = w.at(1);
    } else if (w[0] == "blob") {
      std::string b(std::stoull(w.at(1)), '\0');
      in.read(&b[0], static_cast<std::streamsize>(b.size()));
      in.get();  // the newline after the bytes
      if (!in) throw std::runtime_error("case file " + path + ": truncated blob in " + cur.name);
      auto p = std::make_shared<const std::string>(std::move(b));
      seen[w.at(2)] = p;
      cur.blobs.push_back(p);
    } else if (w[0] == "same") {
      cur.blobs.push_back(seen.at(w.at(1)));
    } else if (w[0] == "end") {
      out.push_back(std::move(cur));
    } else {
      cur.keys[w[0]].emplace_back(w.begin() + 1, w.end());
    }
  }
  return out;
}

std::set<std::string> read_list(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::set<std::string> s;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) s.insert(line.substr(0, line.find('\t')));
  return s;
}

}  // namespace

OpRegistrar::OpRegistrar(const char* name, OpFn fn) { registry()[name] = fn; }

const std::vector<std::vector<std::string>>& Record::lines(const std::string& key) const {
  auto it = keys.find(key);
  if (it == keys.end()) throw std::runtime_error("record " + name + " has no '" + key + "' line");
  return it->second;
}
const std::vector<std::string>& Record::line(const std::string& key) const {
  const auto& l = lines(key);
  if (l.size() != 1) throw std::runtime_error("record " + name + " has " + std::to_string(l.size()) + " '" + key + "' lines");
  return l[0];
}
std::vector<float> Record::floats(const std::string& key) const {
  std::vector<float> v;
  for (const auto& s : line(key)) v.push_back(std::stof(s));
  return v;
}

void Check::same(const std::string& what, const Buffer& gpu, const Buffer& cpu) {
  if (gpu.size() != cpu.size()) {
    fail(what + ": " + std::to_string(gpu.size()) + " bytes on the GPU, " + std::to_string(cpu.size()) + " on the CPU");
    return;
  }
  same(what, gpu.data(), cpu.data(), gpu.size());
}

void Check::same(const std::string& what, const void* gpu, const void* cpu, std::size_t n) {
  const auto* g = static_cast<const unsigned char*>(gpu);
  const auto* c = static_cast<const unsigned char*>(cpu);
  std::size_t bad = 0, first = 0;
  for (std::size_t i = 0; i < n; ++i)
    if (g[i] != c[i] && bad++ == 0) first = i;
  if (!bad) return;
  mismatched_bytes += bad;
  std::ostringstream s;
  s << what << ": " << bad << " of " << n << " bytes differ, the first at byte " << first << " (GPU 0x" << std::hex
    << int(g[first]) << ", CPU 0x" << int(c[first]) << ")";
  fail(s.str());
}

void Check::launches(std::size_t n) {
  seen = take_launches();
  for (const auto& l : seen)
    if (l.result != cudaSuccess)
      fail("launch of " + l.kernel + " (" + l.where + ") failed: " + cudaGetErrorName(l.result) + ": " + l.why);
  if (seen.size() != n)
    fail(std::to_string(seen.size()) + " kernel launches, " + std::to_string(n) + " expected");
}

}  // namespace gdsio_emu

int main(int argc, char** argv) {
  using namespace gdsio_emu;
  std::string cases_path, cases_from, shared_out;
  std::set<std::string> ops;
  bool self_test = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--ops") {
      for (const auto& o : split(value(), ',')) ops.insert(o);
    } else if (a == "--cases-from") {
      cases_from = value();
    } else if (a == "--shared-cases-out") {
      shared_out = value();
    } else if (a == "--self-test") {
      self_test = true;
    } else if (cases_path.empty()) {
      cases_path = a;
    } else {
      std::cerr << "replay: unexpected argument " << a << "\n";
      return 2;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  int failed = 0;
  if (self_test) failed += run_self_tests();
  if (cases_path.empty()) return failed ? 1 : 0;

  std::vector<Record> records = read_cases(cases_path);
  std::set<std::string> only;
  if (!cases_from.empty()) only = read_list(cases_from);
  set_device_count(1);
  expect_launch_target(kDevice, stream());
  std::size_t ran = 0, mismatched = 0, launches = 0, shared_launches = 0, mismatched_bytes = 0;
  std::uint64_t blocks = 0, phases = 0;
  std::map<std::string, std::size_t> per_op;
  std::vector<std::pair<double, std::string>> slowest;
  std::ofstream shared_list;
  if (!shared_out.empty()) shared_list.open(shared_out);
  for (const Record& r : records) {
    if (!ops.empty() && !ops.count(r.op)) continue;
    if (!cases_from.empty() && !only.count(r.name)) continue;
    auto it = registry().find(r.op);
    const auto c0 = std::chrono::steady_clock::now();
    Check check;
    take_launches();
    take_faults();
    if (it == registry().end()) {
      check.fail("no replay handler for op '" + r.op + "' (add GDSIO_EMU_OP(" + r.op + ") in tests/kernels)");
    } else {
      try {
        it->second(r, check);
      } catch (const std::exception& e) {
        check.fail(std::string("threw: ") + e.what());
      }
    }
    for (const auto& f : take_faults()) check.fail("kernel fault: " + f);
    slowest.emplace_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count(), r.name);
    ++ran;
    ++per_op[r.op];
    launches += check.seen.size();
    for (const auto& l : check.seen) blocks += l.blocks, phases += l.phases;
    bool shared = false;
    for (const auto& l : check.seen) shared |= l.static_shared + l.dynamic_shared > 0;
    shared_launches += shared;
    if (shared && shared_list) {
      std::size_t bytes = 0;
      for (const auto& b : r.blobs) bytes += b->size();
      shared_list << r.name << "\t" << bytes << "\n";  // the case and the bytes of its inputs
    }
    mismatched_bytes += check.mismatched_bytes;
    if (check.mismatched_bytes) ++mismatched;
    if (!check.failures.empty()) {
      ++failed;
      for (const auto& f : check.failures) std::cout << "FAIL " << r.name << ": " << f << "\n";
    }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cout << "replay: " << ran << " cases (";
  bool firstop = true;
  for (const auto& [op, n] : per_op) {
    std::cout << (firstop ? "" : ", ") << op << " " << n;
    firstop = false;
  }
  std::cout << "), " << launches << " launches (" << blocks << " blocks, " << phases << " barrier phases), " << shared_launches << " cases with shared memory, " << mismatched
            << " mismatched (" << mismatched_bytes << " bytes), " << failed << " failed, " << fiber_switch_name()
            << " fibers, " << s << " s\n";
  std::sort(slowest.rbegin(), slowest.rend());
  std::cout << "replay: slowest:";
  for (std::size_t k = 0; k < slowest.size() && k < 5; ++k)
    std::cout << (k ? "," : "") << " " << slowest[k].second << " " << slowest[k].first << " s";
  std::cout << "\n";
  if (ran == 0) {
    std::cout << "replay: no case ran\n";
    return 1;
  }
  return failed ? 1 : 0;
}
