// `tessera serve CONFIG load_parameters_path=... tokenizer_path=... [key=value ...]`: the
// OpenAI-compatible HTTP server (infer/server/). Builds the engine with per_device_batch_size
// slots, starts the scheduler thread and the HTTP server, prints the address, and runs until
// SIGINT or SIGTERM. The first signal stops accepting connections and lets the requests in flight
// finish; a second one cancels them. Either way the command exits 0.
#include <fmt/format.h>
#include <fmt/ostream.h>
#include <signal.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <thread>

#include "tessera/cli/commands.h"
#include "tessera/config/config.h"
#include "tessera/core/cpu_features.h"
#include "tessera/core/error.h"
#include "tessera/data/tokenizer.h"
#include "tessera/infer/engine.h"
#include "tessera/infer/sampling.h"
#include "tessera/infer/server/http.h"
#include "tessera/infer/server/scheduler.h"
#include "tessera/infer/server/service.h"

namespace tessera::cli {
namespace {

namespace server = infer::server;

int slots_from(const Config& cfg) {
  const double b = cfg.per_device_batch_size;
  if (b < 1 || b != std::floor(b) || b > 4096)
    fail(ErrorKind::kConfig,
         "per_device_batch_size={}: `tessera serve` uses it as the number of requests decoded together "
         "(KV-cache "
         "slots), a whole number from 1 to 4096",
         b);
  return static_cast<int>(b);
}

// The config's decode_sampling_* as the defaults of a request that leaves sampling out; checked
// here so that a bad combination stops the server at start-up, not every request.
void sampling_defaults(const Config& cfg, server::ServiceOptions& o) {
  const std::string& s = cfg.decode_sampling_strategy;
  infer::validate({.strategy = s,
                   .temperature = cfg.decode_sampling_temperature,
                   .nucleus_p = cfg.decode_sampling_nucleus_p,
                   .top_k = cfg.decode_sampling_top_k});
  o.temperature = s == "greedy" ? 0.0 : cfg.decode_sampling_temperature;
  o.top_p = (s == "nucleus" || s == "composite") && cfg.decode_sampling_nucleus_p > 0
                ? cfg.decode_sampling_nucleus_p
                : 1.0;
  o.top_k = s == "topk" || s == "composite" ? cfg.decode_sampling_top_k : 0;
}

std::string url(const std::string& host, int port) {
  return host.find(':') != std::string::npos ? fmt::format("http://[{}]:{}", host, port)
                                             : fmt::format("http://{}:{}", host, port);
}

// Whole lines on `out` from any thread (the request log comes from connection threads).
class LineLog {
 public:
  explicit LineLog(std::ostream& out) : out_(out) {}
  void operator()(std::string_view line) {
    std::lock_guard lock(mu_);
    fmt::print(out_, "{}\n", line);
    out_.flush();
  }

 private:
  std::mutex mu_;
  std::ostream& out_;
};

server::ServiceOptions service_options(const Config& cfg, const infer::Engine& engine, LineLog& log) {
  server::ServiceOptions so;
  so.model_name = cfg.model_name;
  so.max_prefill_length = engine.max_prefill_length();
  so.max_target_length = engine.max_target_length();
  so.model_vocab = engine.vocab_size();
  so.add_bos = cfg.add_bos;
  so.seed_base = static_cast<uint64_t>(cfg.decode_sampling_seed);
  sampling_defaults(cfg, so);
  so.log = [&log](std::string_view line) { log(line); };
  return so;
}

// Waits for SIGINT or SIGTERM (blocked in every thread, taken here), then stops the HTTP server,
// which lets the requests in flight finish; a second signal meanwhile cancels them.
void run_until_signal(const sigset_t& signals, server::HttpServer& http, server::Scheduler& scheduler,
                      LineLog& log) {
  int sig = 0;
  while (sigwait(&signals, &sig) != 0) {
  }
  log(fmt::format("tessera serve: {}: finishing the requests in flight (signal again to cancel them)",
                  sig == SIGINT ? "SIGINT" : "SIGTERM"));
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    http.stop();
    stopped = true;
  });
  const timespec tick{0, 100'000'000};
  while (!stopped)
    if (sigtimedwait(&signals, nullptr, &tick) > 0) scheduler.cancel_all();
  stopper.join();
  scheduler.stop();
}

}  // namespace

int serve(const ConfigArgs& args, std::ostream& out) {
  Config cfg = load_config(args.config_file, args.overrides);
  set_num_threads(static_cast<int>(cfg.num_threads));
  if (!cfg.run_name.empty())
    fmt::print(out, "tessera serve: resolved config written to {}\n", write_resolved_config(cfg).string());
  if (cfg.tokenizer_path.empty())
    fail(ErrorKind::kConfig,
         "tessera serve needs tokenizer_path (and tokenizer_type) to turn text into tokens");
  const int slots = slots_from(cfg);
  auto tokenizer = data::load_tokenizer(cfg.tokenizer_type, cfg.tokenizer_path);
  auto engine = infer::make_engine(cfg, {.max_slots = slots});
  if (tokenizer->vocab_size() > engine->vocab_size())
    fail(ErrorKind::kConfig, "the tokenizer {} has {} ids but the model's vocab_size is {}",
         cfg.tokenizer_path, tokenizer->vocab_size(), engine->vocab_size());

  LineLog log(out);
  server::Scheduler scheduler(*engine, *tokenizer,
                              {.max_queued = static_cast<int>(cfg.server_max_queued_requests),
                               .eos_id = tokenizer->eos_id(),
                               .sample_vocab = tokenizer->vocab_size()});
  server::Service service(scheduler, *tokenizer, service_options(cfg, *engine, log));

  // SIGINT and SIGTERM are taken by sigwait, so every thread started from here blocks them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // a client that goes away is a failed write, not a signal

  scheduler.start();
  server::HttpServer http({.host = cfg.server_host,
                           .port = static_cast<int>(cfg.server_port),
                           .max_body_bytes = static_cast<size_t>(cfg.server_max_request_bytes),
                           .timeout_seconds = cfg.server_timeout_seconds},
                          [&](const server::HttpRequest& r, server::Responder& o) { service.handle(r, o); });
  http.start();
  log(fmt::format("tessera serve: model {} ({} slots, prompts up to {} tokens, context {}) listening on {}",
                  cfg.model_name, slots, engine->max_prefill_length(), engine->max_target_length(),
                  url(cfg.server_host, http.port())));
  run_until_signal(signals, http, scheduler, log);
  log("tessera serve: stopped");
  return kExitOk;
}

}  // namespace tessera::cli
