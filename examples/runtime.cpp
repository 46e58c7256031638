// tilesmith's C++ API, every op of every family through tilesmith::Runtime, each checked
// against a double-precision CPU loop: a matmul with a fused epilogue; softmax, layernorm and
// rmsnorm with their statistics, the fused norm + activation + residual, the three backwards;
// multi_sum; attention (grouped-query, causal, unequal lengths) and its backward.
//
//   runtime_cpp [DATABASE]      (default: $TILESMITH_DB, else the user's cache directory)
//
// Exit status: 0 every result matches (or there is no GPU: it says so), 1 one does not, 2 an
// error (tilesmith::Error's message names the stage and the problem).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include <tilesmith/runtime.hpp>

#include "bf16.h"

namespace {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}

// A device copy of host values; poisoned (all bits set: NaN) where none are given.
template <class T>
struct DeviceArray {
  T* data = nullptr;
  std::size_t count;
  explicit DeviceArray(std::size_t n) : count(n) {
    check(cudaMalloc(&data, n * sizeof(T)), "cudaMalloc");
    check(cudaMemset(data, 0xff, n * sizeof(T)), "poisoning an output");
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    check(cudaMemcpy(data, host.data(), count * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  ~DeviceArray() { cudaFree(data); }
  std::vector<T> download() const {
    std::vector<T> host(count);
    check(cudaMemcpy(host.data(), data, count * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }
};

std::vector<std::uint16_t> random_bf16(std::size_t n, std::mt19937& rng, float low, float high) {
  std::uniform_real_distribution<float> uniform(low, high);
  std::vector<std::uint16_t> values(n);
  for (auto& value : values) value = to_bf16(uniform(rng));
  return values;
}

// Relative Frobenius error of bf16 results against doubles; prints the line and says whether
// it is within bf16's tolerance (a NaN, an unwritten element, fails).
template <class T>
double value_of(T element) {
  if constexpr (std::is_same_v<T, float>) return element; else return from_bf16(element);
}

template <class T>
bool agrees(const char* what, const std::vector<T>& got, const std::vector<double>& expected,
            const tilesmith::DispatchInfo& dispatch, double tolerance = 1e-2) {
  double error = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double difference = value_of(got[i]) - expected[i];
    error += difference * difference;
    norm += expected[i] * expected[i];
  }
  const double relative = std::sqrt(error / norm);
  const bool ok = relative <= tolerance;  // false for NaN
  std::printf("runtime_cpp: %-44s relative error %.2e (%s), config %s\n", what, relative,
              ok ? "ok" : "WRONG", dispatch.config.c_str());
  return ok;
}

using Bf16 = std::vector<std::uint16_t>;
double at(const Bf16& v, std::size_t i) { return from_bf16(v[i]); }

// rmsnorm, the fused norms and the three backward ops over the same rows.
bool more_rows(tilesmith::Runtime& runtime, std::mt19937& rng, std::int64_t rows, std::int64_t cols,
               const Bf16& x, const Bf16& weight, const Bf16& bias, DeviceArray<std::uint16_t>& dx,
               DeviceArray<std::uint16_t>& dw, DeviceArray<std::uint16_t>& dbias,
               DeviceArray<float>& mean, DeviceArray<float>& rstd) {
  bool ok = true;
  const std::size_t n = static_cast<std::size_t>(rows * cols);
  const Bf16 residual = random_bf16(n, rng, -1, 1), dy = random_bf16(n, rng, -1, 1);
  DeviceArray<std::uint16_t> dres(residual), ddy(dy), out(n), dweight(cols), dbias_out(cols);
  std::vector<double> mu(rows), inv(rows), inv_rms(rows);
  for (std::int64_t r = 0; r < rows; ++r) {
    double total = 0, squares = 0, raw = 0;
    for (std::int64_t c = 0; c < cols; ++c) total += at(x, r * cols + c), raw += std::pow(at(x, r * cols + c), 2);
    mu[r] = total / cols;
    for (std::int64_t c = 0; c < cols; ++c) squares += std::pow(at(x, r * cols + c) - mu[r], 2);
    inv[r] = 1 / std::sqrt(squares / cols + 1e-5);
    inv_rms[r] = 1 / std::sqrt(raw / cols + 1e-5);
  }
  auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  auto silu = [](double v) { return v / (1 + std::exp(-v)); };
  std::vector<double> expected(n);

  DeviceArray<float> rms_rstd(rows);
  const tilesmith::RowArgs rmsnorm{.op = tilesmith::RowOp::rmsnorm, .x = dx.data, .y = out.data,
                                   .rows = rows, .cols = cols, .weight = dw.data, .rstd = rms_rstd.data};
  runtime.rows(rmsnorm);
  for (std::size_t i = 0; i < n; ++i) expected[i] = at(x, i) * inv_rms[i / cols] * at(weight, i % cols);
  ok &= agrees("rmsnorm 1000x1027 (weight, rstd)", out.download(), expected, runtime.describe_rows(rmsnorm));

  const tilesmith::RowArgs fused{.op = tilesmith::RowOp::layernorm_act_residual, .x = dx.data,
                                 .y = out.data, .rows = rows, .cols = cols, .weight = dw.data,
                                 .bias = dbias.data, .residual = dres.data,
                                 .activation = tilesmith::Activation::gelu};
  runtime.rows(fused);
  for (std::size_t i = 0; i < n; ++i)
    expected[i] = gelu((at(x, i) - mu[i / cols]) * inv[i / cols] * at(weight, i % cols) + at(bias, i % cols)) + at(residual, i);
  ok &= agrees("layernorm_act_residual gelu 1000x1027", out.download(), expected, runtime.describe_rows(fused));

  const tilesmith::RowArgs fused_rms{.op = tilesmith::RowOp::rmsnorm_act_residual, .x = dx.data,
                                     .y = out.data, .rows = rows, .cols = cols, .weight = dw.data,
                                     .residual = dres.data, .activation = tilesmith::Activation::silu};
  runtime.rows(fused_rms);
  for (std::size_t i = 0; i < n; ++i)
    expected[i] = silu(at(x, i) * inv_rms[i / cols] * at(weight, i % cols)) + at(residual, i);
  ok &= agrees("rmsnorm_act_residual silu 1000x1027", out.download(), expected, runtime.describe_rows(fused_rms));

  // softmax_backward reads the forward's output: recomputed here into `out`.
  const tilesmith::RowArgs softmax{.op = tilesmith::RowOp::softmax, .x = dx.data, .y = out.data,
                                   .rows = rows, .cols = cols};
  runtime.rows(softmax);
  const Bf16 y = out.download();
  DeviceArray<std::uint16_t> grad(n);
  const tilesmith::RowBackwardArgs softmax_backward{.op = tilesmith::RowBackwardOp::softmax,
                                                    .x = out.data, .dy = ddy.data, .dx = grad.data,
                                                    .rows = rows, .cols = cols};
  runtime.rows_backward(softmax_backward);
  for (std::int64_t r = 0; r < rows; ++r) {
    double dot = 0;
    for (std::int64_t c = 0; c < cols; ++c) dot += at(y, r * cols + c) * at(dy, r * cols + c);
    for (std::int64_t c = 0; c < cols; ++c)
      expected[r * cols + c] = at(y, r * cols + c) * (at(dy, r * cols + c) - dot);
  }
  ok &= agrees("softmax_backward 1000x1027", grad.download(), expected,
               runtime.describe_rows_backward(softmax_backward));

  // The norms' backward: dx, dweight (and dbias), from the forward's statistics (`mean` and
  // `rstd` as the layernorm above wrote them; rms_rstd from rmsnorm).
  for (const bool layer : {true, false}) {
    const tilesmith::RowBackwardArgs backward{
        .op = layer ? tilesmith::RowBackwardOp::layernorm : tilesmith::RowBackwardOp::rmsnorm,
        .x = dx.data, .dy = ddy.data, .dx = grad.data, .rows = rows, .cols = cols,
        .weight = dw.data, .mean = layer ? mean.data : nullptr,
        .rstd = layer ? rstd.data : rms_rstd.data, .dweight = dweight.data,
        .dbias = layer ? dbias_out.data : nullptr};
    runtime.rows_backward(backward);
    std::vector<double> dweight_expected(cols, 0), dbias_expected(cols, 0);
    for (std::int64_t r = 0; r < rows; ++r) {
      double mean_gw = 0, mean_gwx = 0;
      std::vector<double> xhat(cols), gw(cols);
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::size_t i = r * cols + c;
        xhat[c] = layer ? (at(x, i) - mu[r]) * inv[r] : at(x, i) * inv_rms[r];
        gw[c] = at(dy, i) * at(weight, c);
        mean_gw += gw[c] / cols;
        mean_gwx += gw[c] * xhat[c] / cols;
        dweight_expected[c] += at(dy, i) * xhat[c];
        dbias_expected[c] += at(dy, i);
      }
      for (std::int64_t c = 0; c < cols; ++c)
        expected[r * cols + c] = (layer ? inv[r] : inv_rms[r]) *
                                 (gw[c] - (layer ? mean_gw : 0) - xhat[c] * mean_gwx);
    }
    const tilesmith::DispatchInfo info = runtime.describe_rows_backward(backward);
    ok &= agrees(layer ? "layernorm_backward dx" : "rmsnorm_backward dx", grad.download(), expected, info);
    ok &= agrees(layer ? "layernorm_backward dweight" : "rmsnorm_backward dweight", dweight.download(),
                 dweight_expected, info);
    if (layer) ok &= agrees("layernorm_backward dbias", dbias_out.download(), dbias_expected, info);
  }
  return ok;
}

// multi_sum: the sums of 100 fp32 tensors of 1 to 50000 elements in one launch.
bool multi_sum(tilesmith::Runtime& runtime, std::mt19937& rng) {
  struct Entry {
    const void* data;
    std::int64_t length;
  };
  std::uniform_int_distribution<std::int64_t> length(1, 50000);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<std::unique_ptr<DeviceArray<float>>> tensors;
  std::vector<Entry> table;
  std::vector<double> expected;
  std::int64_t total = 0;
  for (int t = 0; t < 100; ++t) {
    std::vector<float> values(static_cast<std::size_t>(length(rng)));
    double sum = 0;
    for (float& v : values) v = uniform(rng), sum += v;
    tensors.push_back(std::make_unique<DeviceArray<float>>(values));
    table.push_back({tensors.back()->data, static_cast<std::int64_t>(values.size())});
    expected.push_back(sum);
    total += static_cast<std::int64_t>(values.size());
  }
  DeviceArray<Entry> device_table(table);
  DeviceArray<float> out(table.size());
  const tilesmith::MultiSumArgs args{.table = device_table.data, .count = 100,
                                     .total_elements = total, .dtype = tilesmith::DType::f32,
                                     .out = out.data};
  runtime.multi_sum(args);
  return agrees("multi_sum of 100 tensors", out.download(), expected, runtime.describe_multi_sum(args), 1e-5);
}

// Attention, BSHD, 4 query heads over 2 kv heads, 33 queries over 65 keys, causal (aligned
// bottom-right), head dim 64; the logsumexp written; then dQ, dK and dV.
bool attention(tilesmith::Runtime& runtime, std::mt19937& rng) {
  const std::int64_t heads = 4, kv_heads = 2, sq = 33, sk = 65, d = 64;
  const Bf16 q = random_bf16(sq * heads * d, rng, -1, 1), k = random_bf16(sk * kv_heads * d, rng, -1, 1),
             v = random_bf16(sk * kv_heads * d, rng, -1, 1), d_o = random_bf16(sq * heads * d, rng, -1, 1);
  DeviceArray<std::uint16_t> dq_in(q), dk_in(k), dv_in(v), ddo(d_o), o(q.size()), dq(q.size()),
      dk(k.size()), dv(v.size());
  DeviceArray<float> lse(heads * sq);
  const tilesmith::AttentionArgs forward{.q = dq_in.data, .k = dk_in.data, .v = dv_in.data,
                                         .o = o.data, .lse = lse.data, .batch = 1,
                                         .heads = heads, .seq_q = sq, .head_dim = d,
                                         .kv_heads = kv_heads, .seq_k = sk, .causal = true};
  runtime.attention(forward);
  const tilesmith::AttentionBackwardArgs backward{.forward = forward, .d_o = ddo.data,
                                                  .dq = dq.data, .dk = dk.data, .dv = dv.data};
  runtime.attention_backward(backward);
  // BSHD: element (s, h, c) at (s * H + h) * D + c.
  auto qi = [&](std::int64_t s, std::int64_t h, std::int64_t c) { return (s * heads + h) * d + c; };
  auto ki = [&](std::int64_t s, std::int64_t h, std::int64_t c) { return (s * kv_heads + h) * d + c; };
  const double scale = 1 / std::sqrt(static_cast<double>(d));
  std::vector<double> out(q.size(), 0), grad_q(q.size(), 0), grad_k(k.size(), 0), grad_v(v.size(), 0);
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t g = h / (heads / kv_heads);
    for (std::int64_t i = 0; i < sq; ++i) {
      const std::int64_t visible = std::min(sk, i + (sk - sq) + 1);
      std::vector<double> p(visible), dp(visible);
      double max = -INFINITY, sum = 0, delta = 0;
      for (std::int64_t j = 0; j < visible; ++j) {
        double s = 0;
        for (std::int64_t c = 0; c < d; ++c) s += at(q, qi(i, h, c)) * at(k, ki(j, g, c));
        p[j] = s * scale;
        max = std::fmax(max, p[j]);
      }
      for (auto& value : p) value = std::exp(value - max), sum += value;
      for (auto& value : p) value /= sum;
      for (std::int64_t c = 0; c < d; ++c) {
        for (std::int64_t j = 0; j < visible; ++j) out[qi(i, h, c)] += p[j] * at(v, ki(j, g, c));
        delta += out[qi(i, h, c)] * at(d_o, qi(i, h, c));
      }
      for (std::int64_t j = 0; j < visible; ++j) {
        for (std::int64_t c = 0; c < d; ++c) {
          dp[j] += at(d_o, qi(i, h, c)) * at(v, ki(j, g, c));
          grad_v[ki(j, g, c)] += p[j] * at(d_o, qi(i, h, c));
        }
        const double ds = p[j] * (dp[j] - delta) * scale;
        for (std::int64_t c = 0; c < d; ++c) {
          grad_q[qi(i, h, c)] += ds * at(k, ki(j, g, c));
          grad_k[ki(j, g, c)] += ds * at(q, qi(i, h, c));
        }
      }
    }
  }
  const tilesmith::DispatchInfo info = runtime.describe_attention(forward);
  const tilesmith::DispatchInfo back = runtime.describe_attention_backward(backward);
  bool ok = agrees("attention GQA 4/2 heads, 33x65 causal, d64", o.download(), out, info);
  ok &= agrees("attention_backward dQ", dq.download(), grad_q, back, 2e-2);
  ok &= agrees("attention_backward dK", dk.download(), grad_k, back, 2e-2);
  ok &= agrees("attention_backward dV", dv.download(), grad_v, back, 2e-2);
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("runtime_cpp: skipped: no GPU (%s)\n", cudaGetErrorString(cudaGetLastError()));
    return 0;
  }
  try {
    tilesmith::Runtime runtime({.database = argc > 1 ? argv[1] : ""});
    std::mt19937 rng(11);
    bool ok = true;

    // C = gelu(A * B) + residual: 300 x 520 x 136, row-major, bf16.
    const std::int64_t m = 300, n = 520, k = 136;
    const auto a = random_bf16(m * k, rng, -1, 1), b = random_bf16(k * n, rng, -1, 1),
               residual = random_bf16(m * n, rng, -1, 1);
    DeviceArray<std::uint16_t> da(a), db(b), dr(residual), dc(m * n);
    const tilesmith::MatmulArgs matmul{.a = da.data, .b = db.data, .c = dc.data, .m = m, .n = n,
                                       .k = k, .dtype = tilesmith::DType::bf16,
                                       .residual = dr.data,
                                       .activation = tilesmith::Activation::gelu};
    runtime.matmul(matmul);
    std::vector<double> expected(m * n);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0;
        for (std::int64_t p = 0; p < k; ++p) sum += from_bf16(a[i * k + p]) * from_bf16(b[p * n + j]);
        expected[i * n + j] = 0.5 * sum * (1 + std::erf(sum / std::sqrt(2.0))) + from_bf16(residual[i * n + j]);
      }
    ok &= agrees("matmul 300x520x136 gelu + residual", dc.download(), expected,
                 runtime.describe_matmul(matmul));

    // softmax and layernorm (weight, bias, mean and rstd written) over 1000 rows of 1027.
    const std::int64_t rows = 1000, cols = 1027;
    const auto x = random_bf16(rows * cols, rng, -4, 4), weight = random_bf16(cols, rng, 0.5, 1.5),
               bias = random_bf16(cols, rng, -1, 1);
    DeviceArray<std::uint16_t> dx(x), dw(weight), dbias(bias), dy(rows * cols);
    DeviceArray<float> mean(rows), rstd(rows);
    const tilesmith::RowArgs softmax{.op = tilesmith::RowOp::softmax, .x = dx.data, .y = dy.data,
                                     .rows = rows, .cols = cols};
    runtime.rows(softmax);
    std::vector<double> soft(rows * cols), norm(rows * cols);
    for (std::int64_t r = 0; r < rows; ++r) {
      const std::uint16_t* row = &x[r * cols];
      double max = -INFINITY, sum = 0, total = 0, squares = 0;
      for (std::int64_t c = 0; c < cols; ++c) max = std::fmax(max, from_bf16(row[c]));
      for (std::int64_t c = 0; c < cols; ++c) sum += std::exp(from_bf16(row[c]) - max);
      for (std::int64_t c = 0; c < cols; ++c) {
        soft[r * cols + c] = std::exp(from_bf16(row[c]) - max) / sum;
        total += from_bf16(row[c]);
      }
      const double average = total / cols;
      for (std::int64_t c = 0; c < cols; ++c) squares += std::pow(from_bf16(row[c]) - average, 2);
      const double inverse = 1 / std::sqrt(squares / cols + 1e-5);
      for (std::int64_t c = 0; c < cols; ++c)
        norm[r * cols + c] = (from_bf16(row[c]) - average) * inverse * from_bf16(weight[c]) + from_bf16(bias[c]);
    }
    ok &= agrees("softmax 1000x1027", dy.download(), soft, runtime.describe_rows(softmax));
    const tilesmith::RowArgs layernorm{.op = tilesmith::RowOp::layernorm, .x = dx.data,
                                       .y = dy.data, .rows = rows, .cols = cols,
                                       .weight = dw.data, .bias = dbias.data, .mean = mean.data,
                                       .rstd = rstd.data};
    runtime.rows(layernorm);
    ok &= agrees("layernorm 1000x1027 (weight, bias, statistics)", dy.download(), norm,
                 runtime.describe_rows(layernorm));
    ok &= more_rows(runtime, rng, rows, cols, x, weight, bias, dx, dw, dbias, mean, rstd);
    ok &= multi_sum(runtime, rng);
    ok &= attention(runtime, rng);
    return ok ? 0 : 1;
  } catch (const std::exception& error) {  // tilesmith::Error, or a CUDA call above
    std::fprintf(stderr, "runtime_cpp: %s\n", error.what());
    return 2;
  }
}
