// Which of the H100's two L2 partitions is near each SM. Each SM in turn (one thread, the others
// waiting on a ticket) times one load of each of LINES lines right after discarding the line
// from L2 (a miss: the request goes to the line's home partition and on to DRAM), then a second
// load of it (a hit). A line homed in the SM's own partition answers sooner, so SMs of one
// partition see the same lines fast: each SM is put with the first SM it agrees with on most
// lines. Prints the SMs of each partition and the partition bit masks (bit s: SM s in partition
// 1) for experiments that place work by partition. Needs no tilesmith build:
//   nvcc -O2 -arch=sm_90a -cudart static -o build/l2_partition bench/l2_partition.cu
//   build/l2_partition                 (on the GPU machine, carrying build/)
#include <algorithm>
#include <cstdio>
#include <vector>

#include "probe_common.cuh"

constexpr int LINES = 192;
constexpr int MAX_SM = 192;

__device__ unsigned ticket_counter, turn_counter;

__global__ void probe(const unsigned* buffer, const long long* offsets, unsigned* claimed,
                      unsigned* miss, unsigned* hit, int* sm_of_turn) {
  const unsigned sm = smid();
  if (threadIdx.x != 0 || sm >= MAX_SM) return;
  if (atomicCAS(&claimed[sm], 0u, 1u) != 0u) return;
  const unsigned ticket = atomicAdd(&ticket_counter, 1u);
  while (atomicAdd(&turn_counter, 0u) != ticket) {
  }
  sm_of_turn[ticket] = sm;
  unsigned sink = 0;
  for (int i = 0; i < LINES; ++i) {
    const unsigned* line = buffer + offsets[i];
    asm volatile("discard.global.L2 [%0], 128;" ::"l"(line) : "memory");
    __threadfence();
    unsigned v, w;
    long long t0 = clock64();
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(v) : "l"(line) : "memory");
    asm volatile("add.u32 %0, %0, 1;" : "+r"(v));
    long long t1 = clock64();
    asm volatile("ld.global.cg.u32 %0, [%1];" : "=r"(w) : "l"(line + (v & 0x10000000u)) : "memory");
    asm volatile("add.u32 %0, %0, 1;" : "+r"(w));
    long long t2 = clock64();
    sink += v + w;
    miss[sm * LINES + i] = static_cast<unsigned>(t1 - t0);
    hit[sm * LINES + i] = static_cast<unsigned>(t2 - t1);
  }
  if (sink == 0x12345678u) claimed[0] = 7;  // keeps the loads
  __threadfence();
  atomicAdd(&turn_counter, 1u);
}

int main() {
  const size_t words = (256u << 20) / 4;  // 256 MB, lines spread over it
  unsigned* buffer;
  CHECK(cudaMalloc(&buffer, words * 4));
  CHECK(cudaMemset(buffer, 0, words * 4));
  std::vector<long long> offsets(LINES);
  unsigned long long state = 88172645463325252ull;
  for (auto& o : offsets) {
    state ^= state << 13, state ^= state >> 7, state ^= state << 17;
    o = static_cast<long long>(state % (words / 32)) * 32;  // a 128-byte line
  }
  long long* d_offsets;
  unsigned *claimed, *miss, *hit;
  int* sm_of_turn;
  CHECK(cudaMalloc(&d_offsets, LINES * 8));
  CHECK(cudaMemcpy(d_offsets, offsets.data(), LINES * 8, cudaMemcpyHostToDevice));
  CHECK(cudaMallocManaged(&claimed, MAX_SM * 4));
  CHECK(cudaMallocManaged(&miss, MAX_SM * LINES * 4));
  CHECK(cudaMallocManaged(&hit, MAX_SM * LINES * 4));
  CHECK(cudaMallocManaged(&sm_of_turn, MAX_SM * 4));
  std::fill(claimed, claimed + MAX_SM, 0u);
  std::fill(sm_of_turn, sm_of_turn + MAX_SM, -1);
  int sms = 0;
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  // Enough one-warp blocks that every SM holds one; all are resident at once, so the spinning
  // ones cannot keep the ticket's holder from running.
  probe<<<sms * 8, 32>>>(buffer, d_offsets, claimed, miss, hit, sm_of_turn);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<int> seen;
  for (int t = 0; t < MAX_SM; ++t)
    if (sm_of_turn[t] >= 0) seen.push_back(sm_of_turn[t]);
  std::sort(seen.begin(), seen.end());
  printf("SMs probed: %zu of %d\n", seen.size(), sms);
  // Per SM, which lines it saw fast: under its own median miss latency.
  std::vector<std::vector<char>> fast(MAX_SM, std::vector<char>(LINES));
  for (int s : seen) {
    std::vector<unsigned> v(miss + s * LINES, miss + (s + 1) * LINES);
    std::vector<unsigned> sorted = v;
    std::nth_element(sorted.begin(), sorted.begin() + LINES / 2, sorted.end());
    const unsigned median = sorted[LINES / 2];
    for (int i = 0; i < LINES; ++i) fast[s][i] = v[i] < median;
  }
  // Partition of each SM: agreement with the first SM seen (near 100%: same; near 0%: other).
  const int ref = seen.front();
  std::vector<int> part(MAX_SM, -1);
  printf("sm: agreement with sm %d, miss near/far, hit near/far (cycles, medians)\n", ref);
  for (int s : seen) {
    int agree = 0;
    for (int i = 0; i < LINES; ++i) agree += fast[s][i] == fast[ref][i];
    part[s] = agree * 2 >= LINES ? 0 : 1;
    std::vector<unsigned> mn, mf, hn, hf;
    for (int i = 0; i < LINES; ++i) {
      (fast[s][i] ? mn : mf).push_back(miss[s * LINES + i]);
      (fast[s][i] ? hn : hf).push_back(hit[s * LINES + i]);
    }
    auto med = [](std::vector<unsigned> v) {
      if (v.empty()) return 0u;
      std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
      return v[v.size() / 2];
    };
    printf(" %3d: %5.1f%% p%d  miss %4u/%4u  hit %4u/%4u\n", s, 100.0 * agree / LINES, part[s],
           med(mn), med(mf), med(hn), med(hf));
  }
  unsigned long long mask[3] = {0, 0, 0};
  for (int p = 0; p < 2; ++p) {
    int count = 0;
    printf("partition %d:", p);
    for (int s : seen)
      if (part[s] == p) printf(" %d", s), ++count;
    printf("  (%d SMs)\n", count);
  }
  for (int s : seen)
    if (part[s] == 1) mask[s / 64] |= 1ull << (s % 64);
  printf("PARTITION_MASKS 0x%016llxull 0x%016llxull 0x%016llxull\n", mask[0], mask[1], mask[2]);
  return 0;
}
