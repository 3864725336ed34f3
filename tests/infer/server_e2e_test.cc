// `tessera serve` end to end, as a user meets it: a tiny Llama trained for two steps by
// `tessera train` (synthetic tokens), served with the fixture byte-level BPE tokenizer on a free
// loopback port; raw-socket requests (malformed JSON, an oversize body) get 4xx JSON errors and
// leave the server healthy; the official `openai` Python client passes
// tests/infer/openai_client_check.py (completions, chat, streaming, four concurrent streams,
// errors); a client that leaves mid-stream has its request cancelled; and SIGTERM lets a stream in
// flight finish before the server exits 0.
// The client part needs `openai` in $TESSERA_PYTHON (scripts/setup.sh installs it in .venv-test);
// without it the test reports itself skipped after the other checks, saying so.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <regex>

#include "tessera/core/source_dir.h"
#include "testing/process_util.h"
#include "testing/socket_util.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::shell_quote;
using testing::tessera_binary;

using testing::Child;
using testing::read_until;
using testing::spawn;
using testing::wait_exit_code;

int run_to_end(const std::vector<std::string>& args, std::string& text) {
  Child c = spawn(args);
  read_until(
      c.out, [](const std::string&) { return false; }, text);
  close(c.out);
  return wait_exit_code(c.pid);
}

int connect_to(int port) {
  return testing::connect_loopback(port, 20);
}

// Sends `request` on a new connection and reads until `done` holds or the server closes.
std::string round_trip(
    int port, const std::string& request,
    const std::function<bool(const std::string&)>& done = [](const std::string&) { return false; }) {
  const int fd = connect_to(port);
  EXPECT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  std::string got;
  testing::recv_until(fd, done, got);
  ::close(fd);
  return got;
}

std::string post(std::string_view path, std::string_view body) {
  return fmt::format(
      "POST {} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n"
      "Connection: close\r\n\r\n{}",
      path, body.size(), body);
}

constexpr int kPromptLimit = 64;  // max_prefill_predict_length
constexpr int kContext = 4096;    // max_target_length

class ServerE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_regular_file(tessera_binary())) {
      if (std::getenv("TESSERA_BINARY")) FAIL() << "TESSERA_BINARY=" << tessera_binary() << " is not a file";
      GTEST_SKIP() << "no tessera binary at " << tessera_binary();
    }
    std::string tmpl = (fs::path(::testing::TempDir()) / "tessera_serve_e2e_XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    if (server_.pid > 0) {
      kill(server_.pid, SIGKILL);
      wait_exit_code(server_.pid);
    }
    if (server_.out >= 0) close(server_.out);
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  // Trains a checkpoint (two steps of llama-test on synthetic tokens), starts `tessera serve` on it
  // with a free port, and returns the port (0 on failure, with the reason recorded).
  int start_server() {
    std::string text;
    const int trained =
        run_to_end({"train", base(), "run_name=tiny", "base_output_directory=" + (dir_ / "runs").string(),
                    "model_name=llama-test", "steps=2", "checkpoint_period=2", "per_device_batch_size=1",
                    "max_target_length=128", "device_peak_tflops=1", "num_threads=1",
                    "enable_tensorboard=false", "prompt="},
                   text);
    const fs::path ckpt = dir_ / "runs" / "tiny" / "checkpoints" / "2";
    EXPECT_EQ(trained, 0) << text;
    if (!fs::is_directory(ckpt)) return 0;
    const fs::path tokenizer = tessera::source_dir() / "tests" / "data" / "fixtures" / "tiny_bpe";
    server_ = spawn({"serve", base(), "model_name=llama-test", "load_parameters_path=" + ckpt.string(),
                     "tokenizer_type=huggingface", "tokenizer_path=" + tokenizer.string(), "server_port=0",
                     "per_device_batch_size=4", "max_target_length=" + std::to_string(kContext),
                     "max_prefill_predict_length=" + std::to_string(kPromptLimit), "num_threads=1"});
    if (server_.pid <= 0) return 0;
    text.clear();
    // The port is copied out of the line inside the callback: a match refers into the line, which
    // read_until frees after the call.
    std::string port;
    const std::regex listening("listening on http://127\\.0\\.0\\.1:([0-9]+)");
    const bool up = read_until(
        server_.out,
        [&](const std::string& l) {
          std::smatch m;
          if (!std::regex_search(l, m, listening)) return false;
          port = m[1];
          return true;
        },
        text);
    EXPECT_TRUE(up) << text;
    return up ? std::stoi(port) : 0;
  }

  std::string base() const { return (tessera::source_dir() / "configs" / "base.yml").string(); }

  fs::path dir_;
  Child server_;
};

// Body of an HTTP response.
std::string body_of(const std::string& response) {
  return response.substr(response.find("\r\n\r\n") + 4);
}

// Opens a stream with a raw socket and reads until its first event; returns the socket (the
// bytes read so far in `got`), or -1.
int open_stream(int port, const std::string& body, std::string& got) {
  const int fd = connect_to(port);
  const std::string req = post("/v1/completions", body);
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size()))
    return ::close(fd), -1;
  if (!testing::recv_until(
          fd, [](const std::string& s) { return s.find("data: ") != std::string::npos; }, got))
    return ::close(fd), -1;
  return fd;
}

// Runs tests/infer/openai_client_check.py against `url`. Returns why it was skipped (no openai
// module), or empty after checking its exit status.
std::string run_client_check(const std::string& url) {
  const std::string py = testing::test_python();
  if (!testing::python_imports("openai"))
    return "'" + py + " -c \"import openai\"' fails: install it with `" + py +
           " -m pip install openai` (scripts/setup.sh does) or point TESSERA_PYTHON at a Python that has it";
  const std::string script = (tessera::source_dir() / "tests" / "infer" / "openai_client_check.py").string();
  const testing::CommandResult r =
      testing::run_command(shell_quote(py) + " " + shell_quote(script) + " " + url + " llama-test " +
                               std::to_string(kPromptLimit) + " " + std::to_string(kContext),
                           300);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return {};
}

TEST_F(ServerE2e, ServesTheOpenAiClientAndShutsDownCleanly) {
  const int port = start_server();
  ASSERT_GT(port, 0);
  const std::string health = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  ASSERT_TRUE(round_trip(port, health).starts_with("HTTP/1.1 200 OK\r\n"));

  // Malformed JSON over a raw socket: a 400 with OpenAI's error shape.
  std::string r = round_trip(port, post("/v1/completions", "{\"model\": \"llama-test\", \"prompt\": "));
  ASSERT_TRUE(r.starts_with("HTTP/1.1 400 ")) << r;
  const nlohmann::json err = nlohmann::json::parse(body_of(r))["error"];
  EXPECT_EQ(err["type"], "invalid_request_error");
  EXPECT_NE(err["message"].get<std::string>().find("not valid JSON"), std::string::npos);
  // A body over server_max_request_bytes (1 MiB by default) is refused from its Content-Length.
  r = round_trip(port, "POST /v1/completions HTTP/1.1\r\nContent-Length: 100000000\r\n\r\n{");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 413 ")) << r;
  r = round_trip(port, "GARBAGE\r\n\r\n");
  EXPECT_TRUE(r.starts_with("HTTP/1.1 400 ")) << r;
  r = round_trip(port, health);
  ASSERT_TRUE(r.starts_with("HTTP/1.1 200 OK\r\n")) << r;
  EXPECT_EQ(nlohmann::json::parse(body_of(r))["status"], "ok");

  const std::string skipped = run_client_check("http://127.0.0.1:" + std::to_string(port));

  // A client that leaves in the middle of a long stream: its request is cancelled and its slot
  // freed long before max_tokens (the server's log line says how far it got).
  const int kLong = kContext - kPromptLimit;
  std::string stream;
  const int leaving = open_stream(
      port,
      fmt::format(R"({{"model": "llama-test", "prompt": "Bye", "max_tokens": {}, "stream": true}})", kLong),
      stream);
  ASSERT_GE(leaving, 0) << stream;
  ::close(leaving);

  // SIGTERM with a stream in flight: the stream finishes, then the server exits 0.
  stream.clear();
  const int fd = open_stream(
      port,
      R"({"model": "llama-test", "prompt": "The end", "max_tokens": 40, "stream": true, "temperature": 0})",
      stream);
  ASSERT_GE(fd, 0) << stream;
  kill(server_.pid, SIGTERM);
  char buf[4096];
  for (ssize_t n; (n = ::recv(fd, buf, sizeof buf, 0)) > 0;) stream.append(buf, static_cast<size_t>(n));
  ::close(fd);
  EXPECT_NE(stream.find("\"finish_reason\":\""), std::string::npos) << stream;
  EXPECT_TRUE(stream.ends_with("data: [DONE]\n\n\r\n0\r\n\r\n")) << stream;
  std::string text;  // the server's output from its address line on
  read_until(
      server_.out, [](const std::string&) { return false; }, text);
  EXPECT_EQ(wait_exit_code(server_.pid), 0) << text;
  server_.pid = -1;
  EXPECT_NE(text.find("tessera serve: stopped"), std::string::npos) << text;
  EXPECT_NE(text.find("POST /v1/completions (stream)"), std::string::npos) << text;  // the request log
  std::smatch gone;
  ASSERT_TRUE(
      std::regex_search(text, gone, std::regex("completion=([0-9]+) finish=cancelled \\(client gone\\)")))
      << text;
  EXPECT_LT(std::stoi(gone[1]), kLong) << text;

  if (!skipped.empty()) GTEST_SKIP() << skipped;
}

}  // namespace
}  // namespace tessera
