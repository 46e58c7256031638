// tilesmith's C++ API: a matmul with a fused epilogue and two row ops (softmax, layernorm with
// its statistics) through tilesmith::Runtime, each checked against a double-precision CPU loop.
//
//   runtime_cpp [DATABASE]      (default: $TILESMITH_DB, else the user's cache directory)
//
// Exit status: 0 every result matches (or there is no GPU: it says so), 1 one does not, 2 an
// error (tilesmith::Error's message names the stage and the problem).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <tilesmith/runtime.hpp>

namespace {

std::uint16_t to_bf16(float value) {  // round to nearest even
  std::uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}
double from_bf16(std::uint16_t half) {
  const std::uint32_t bits = static_cast<std::uint32_t>(half) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

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
bool agrees(const char* what, const std::vector<std::uint16_t>& got, const std::vector<double>& expected,
            const tilesmith::DispatchInfo& dispatch) {
  double error = 0, norm = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double difference = from_bf16(got[i]) - expected[i];
    error += difference * difference;
    norm += expected[i] * expected[i];
  }
  const double relative = std::sqrt(error / norm);
  const bool ok = relative <= 1e-2;
  std::printf("runtime_cpp: %-44s relative error %.2e (%s), config %s\n", what, relative,
              ok ? "ok" : "WRONG", dispatch.config.c_str());
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
    return ok ? 0 : 1;
  } catch (const std::exception& error) {  // tilesmith::Error, or a CUDA call above
    std::fprintf(stderr, "runtime_cpp: %s\n", error.what());
    return 2;
  }
}
