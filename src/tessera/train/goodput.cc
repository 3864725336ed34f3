// Goodput accounting and its file (goodput.h).
#include "tessera/train/goodput.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "tessera/core/error.h"
#include "tessera/core/file.h"

namespace tessera::train {

namespace {

nlohmann::json to_json(const GoodputTotals& t) {
  return {{"total_seconds", t.total},
          {"productive_seconds", t.productive},
          {"startup_seconds", t.startup},
          {"data_seconds", t.data},
          {"checkpoint_save_seconds", t.checkpoint_save},
          {"checkpoint_restore_seconds", t.checkpoint_restore},
          {"lost_seconds", t.lost},
          {"productive_steps", t.productive_steps},
          {"lost_steps", t.lost_steps},
          {"max_step_reached", t.max_step_reached}};
}

GoodputTotals from_json(const nlohmann::json& j) {
  GoodputTotals t;
  t.total = j.at("total_seconds").get<double>();
  t.productive = j.at("productive_seconds").get<double>();
  t.startup = j.at("startup_seconds").get<double>();
  t.data = j.at("data_seconds").get<double>();
  t.checkpoint_save = j.at("checkpoint_save_seconds").get<double>();
  t.checkpoint_restore = j.at("checkpoint_restore_seconds").get<double>();
  t.lost = j.at("lost_seconds").get<double>();
  t.productive_steps = j.at("productive_steps").get<int64_t>();
  t.lost_steps = j.at("lost_steps").get<int64_t>();
  t.max_step_reached = j.at("max_step_reached").get<int64_t>();
  return t;
}

}  // namespace

Goodput::Goodput(std::filesystem::path file) : file_(std::move(file)) {
  if (file_.empty() || !std::filesystem::exists(file_)) return;
  try {
    before_ = from_json(nlohmann::json::parse(read_file(file_)));
  } catch (const std::exception& e) {
    fail(ErrorKind::kIo, "{}: not a goodput file ({}); remove it to start the accounting afresh",
         file_.string(), e.what());
  }
}

void Goodput::resumed_at(int64_t step) {
  if (before_.max_step_reached <= step || before_.productive_steps == 0) return;
  // The steps after the restored checkpoint are done again: their time, at the earlier runs'
  // mean productive step time, moves from productive to lost.
  const int64_t lost = before_.max_step_reached - step;
  const double per_step = before_.productive / static_cast<double>(before_.productive_steps);
  const double seconds = std::min(before_.productive, per_step * static_cast<double>(lost));
  before_.lost += seconds;
  before_.lost_steps += lost;
  before_.productive -= seconds;
  before_.productive_steps -= std::min(lost, before_.productive_steps);
  before_.max_step_reached = step;
}

void Goodput::add_step(int64_t step, double seconds, double data_seconds) {
  run_.productive += std::max(0.0, seconds - data_seconds);
  ++run_.productive_steps;
  run_.max_step_reached = std::max(run_.max_step_reached, step + 1);
}

GoodputTotals Goodput::totals(double run_seconds) const {
  GoodputTotals t = before_;
  t.total += run_seconds;
  t.productive += run_.productive;
  t.startup += run_.startup;
  t.data += run_.data;
  t.checkpoint_save += run_.checkpoint_save;
  t.checkpoint_restore += run_.checkpoint_restore;
  t.lost += run_.lost;
  t.productive_steps += run_.productive_steps;
  t.lost_steps += run_.lost_steps;
  t.max_step_reached = std::max(t.max_step_reached, run_.max_step_reached);
  return t;
}

std::string Goodput::log_line(double run_seconds) const {
  const GoodputTotals t = totals(run_seconds);
  const double other = std::max(
      0.0, t.total - t.productive - t.startup - t.data - t.checkpoint_save - t.checkpoint_restore - t.lost);
  return fmt::format(
      "goodput: {:.1f}% of {:.2f} s (productive steps {:.2f} s over {} steps; badput: start-up {:.2f} s, "
      "data waiting {:.2f} s, checkpoint save {:.2f} s, checkpoint restore {:.2f} s, lost {:.2f} s "
      "({} steps recomputed after a resume), other {:.2f} s)\n",
      t.total > 0 ? 100 * t.productive / t.total : 0.0, t.total, t.productive, t.productive_steps, t.startup,
      t.data, t.checkpoint_save, t.checkpoint_restore, t.lost, t.lost_steps, other);
}

std::vector<Scalar> Goodput::scalars(double run_seconds) const {
  const GoodputTotals t = totals(run_seconds);
  return {{"goodput/goodput_percent", t.total > 0 ? 100 * t.productive / t.total : 0.0},
          {"goodput/total_seconds", t.total},
          {"goodput/productive_seconds", t.productive},
          {"goodput/badput_startup_seconds", t.startup},
          {"goodput/badput_data_loading_seconds", t.data},
          {"goodput/badput_checkpoint_save_seconds", t.checkpoint_save},
          {"goodput/badput_checkpoint_restore_seconds", t.checkpoint_restore},
          {"goodput/badput_wasted_progress_seconds", t.lost}};
}

void Goodput::save(double run_seconds) const {
  if (file_.empty()) return;
  write_file_atomically(file_, to_json(totals(run_seconds)).dump(2) + "\n");
}

}  // namespace tessera::train
