// Rendering a config into a translation unit, and the hashes results and cubins are stored under.
#include <gtest/gtest.h>

#include <cctype>
#include <set>
#include <string>

#include "generator/rendered_source.hpp"
#include "support/matmul_configs.hpp"
#include "templates/registry.hpp"

namespace tilesmith {
namespace {

using testing::tile_config;

const Family& matmul() { return find_family("matmul"); }

Problem matmul_problem(std::int64_t m, std::int64_t n, std::int64_t k, DType in = DType::bf16,
                       DType out = DType::bf16) {
  return Problem{"matmul", in, out, {m, n, k}};
}


bool is_lowercase_hex(const std::string& text) {
  for (char c : text)
    if (!std::isdigit(static_cast<unsigned char>(c)) && (c < 'a' || c > 'f')) return false;
  return true;
}

// ---------------------------------------------------------------------------------------------
// render

TEST(RenderTest, IsDeterministic) {
  Problem problem = matmul_problem(4096, 4096, 4096);
  Config config = tile_config(128, 128, 32, 2, 2, 4);
  RenderedSource first = render(matmul(), config, problem);
  RenderedSource second = render(matmul(), config, problem);
  EXPECT_EQ(first.text, second.text);
  EXPECT_EQ(first.hash, second.hash);
  EXPECT_EQ(first.kernel_expressions, second.kernel_expressions);
  EXPECT_EQ(first.headers, second.headers);
  EXPECT_EQ(first.main_name, second.main_name);
}

TEST(RenderTest, CarriesTheFamilyConfigAndKernelExpression) {
  Problem problem = matmul_problem(4096, 4096, 4096);
  Config config = tile_config(128, 64, 32, 2, 1, 3, 1);
  RenderedSource source = render(matmul(), config, problem);
  EXPECT_EQ(source.family, "matmul");
  EXPECT_EQ(source.config, config);
  EXPECT_EQ(source.kernel_expressions, matmul().kernel_expressions(config, problem));
  EXPECT_EQ(source.headers, matmul().source().files);
  EXPECT_FALSE(source.main_name.empty());
  EXPECT_NE(source.text.find(config.text()), std::string::npos)
      << "the config should be readable in the source";
  EXPECT_NE(source.text.find(source.kernel_expressions.at(0)), std::string::npos);
  EXPECT_NE(source.text.find("#include \"matmul/matmul.cuh\""), std::string::npos)
      << "the translation unit should include the variant's kernel file";
  EXPECT_EQ(source.hash.size(), 32u);
  EXPECT_TRUE(is_lowercase_hex(source.hash)) << source.hash;
}

TEST(RenderTest, EveryKernelOfTheSpaceHasItsOwnHash) {
  Problem problem = matmul_problem(4096, 4096, 4096);
  std::set<std::string> hashes, with_config;
  int kernels = 0;
  for (int block_m : {64, 128, 256})
    for (int stages : {2, 3, 4, 5}) {
      ++kernels;
      for (int group_m : {1, 8}) {
        const RenderedSource source =
            render(matmul(), tile_config(block_m, 128, 32, 2, 2, stages, group_m), problem);
        hashes.insert(source.hash);
        with_config.insert(source.hash_with_config);
      }
    }
  EXPECT_EQ(hashes.size(), static_cast<std::size_t>(kernels));
  EXPECT_EQ(with_config.size(), static_cast<std::size_t>(2 * kernels));
}

TEST(RenderTest, OneCompiledParameterChangesTheHash) {
  Problem problem = matmul_problem(4096, 4096, 4096);
  Config base = tile_config(128, 128, 32, 2, 2, 4, 8);
  const RenderedSource base_source = render(matmul(), base, problem);
  for (const auto& [name, value] : base.values) {
    if (name == "variant") continue;  // another variant takes other parameters: VariantPicks...
    Config changed = base;
    changed.values[name] = value == 0 ? 1 : value == 1 ? 2 : value / 2;
    const RenderedSource source = render(matmul(), changed, problem);
    EXPECT_NE(source.hash_with_config, base_source.hash_with_config) << name;
    if (name == "group_m")  // a kernel argument (matmul_tile_order.cuh): the same kernel
      EXPECT_EQ(source.hash, base_source.hash);
    else
      EXPECT_NE(source.hash, base_source.hash) << name;
  }
}

// The config comment is not part of the hash: configs whose kernels are the same share one,
// and with it one compile in a sweep and one stored cubin.
TEST(RenderTest, ConfigsWithTheSameKernelsShareTheHash) {
  const Problem problem = matmul_problem(4096, 4096, 4096);
  const RenderedSource one = render(matmul(), tile_config(128, 128, 32, 2, 2, 4, 1), problem);
  const RenderedSource eight = render(matmul(), tile_config(128, 128, 32, 2, 2, 4, 8), problem);
  EXPECT_EQ(one.kernel_expressions, eight.kernel_expressions);
  EXPECT_NE(one.text, eight.text);  // each names its own config
  EXPECT_EQ(one.hash, eight.hash);
  EXPECT_NE(one.hash_with_config, eight.hash_with_config);
}

TEST(RenderTest, AlignmentAndDtypesChangeTheHash) {
  Config config = tile_config(128, 128, 32, 2, 2, 4);
  RenderedSource aligned = render(matmul(), config, matmul_problem(4096, 4096, 4096));
  RenderedSource unaligned = render(matmul(), config, matmul_problem(4093, 4093, 4093));
  EXPECT_NE(aligned.kernel_expressions, unaligned.kernel_expressions);
  EXPECT_NE(aligned.hash, unaligned.hash);
  EXPECT_NE(aligned.text, unaligned.text);

  std::set<std::string> hashes = {aligned.hash};
  hashes.insert(
      render(matmul(), config, matmul_problem(4096, 4096, 4096, DType::f16, DType::f16)).hash);
  hashes.insert(
      render(matmul(), config, matmul_problem(4096, 4096, 4096, DType::bf16, DType::f32)).hash);
  hashes.insert(
      render(matmul(), config, matmul_problem(4096, 4096, 4096, DType::f16, DType::f32)).hash);
  EXPECT_EQ(hashes.size(), 4u);
}

TEST(RenderTest, ShapesWithTheSameAlignmentShareTheSource) {
  // The kernel takes M, N and K at run time: a cubin compiled for one aligned shape is the same
  // cubin for another, and the hash (the cubin cache key) says so.
  Config config = tile_config(128, 128, 32, 2, 2, 4);
  RenderedSource large = render(matmul(), config, matmul_problem(4096, 4096, 4096));
  RenderedSource small = render(matmul(), config, matmul_problem(1000, 64, 2048));
  EXPECT_EQ(large.hash, small.hash);
  EXPECT_EQ(large.text, small.text);
}

TEST(RenderTest, VariantPicksTheKernelFileAndTemplate) {
  Problem problem = matmul_problem(4096, 4096, 4096);
  RenderedSource mma = render(matmul(), tile_config(128, 128, 32, 2, 2, 4), problem);
  RenderedSource wgmma = render(matmul(), testing::wgmma_config(128, 256, 4, 2, 2, 1), problem);
  EXPECT_NE(mma.text.find("#include \"matmul/matmul.cuh\""), std::string::npos);
  EXPECT_NE(wgmma.text.find("#include \"matmul/matmul_sm90.cuh\""), std::string::npos);
  ASSERT_EQ(wgmma.kernel_expressions.size(), 1u);
  EXPECT_EQ(wgmma.kernel_expressions[0], "tilesmith::matmul_sm90<128,256,64,2,2,1,1,1,0,0,0,1,0,0>");
  EXPECT_NE(mma.hash, wgmma.hash);
}

TEST(RenderTest, ReferenceIsItsOwnTranslationUnit) {
  Problem problem = matmul_problem(64, 64, 64);
  RenderedSource reference = render_reference(matmul(), problem);
  RenderedSource kernel =
      render(matmul(), matmul().default_config(problem, DeviceTarget::assumed_for_arch("sm_90a")),
             problem);
  EXPECT_EQ(reference.family, "matmul");
  EXPECT_TRUE(reference.config.values.empty());
  EXPECT_EQ(reference.kernel_expressions,
            std::vector<std::string>{matmul().reference_expression(problem)});
  EXPECT_NE(reference.text.find(reference.kernel_expressions.at(0)), std::string::npos);
  EXPECT_NE(reference.hash, kernel.hash);
  EXPECT_NE(reference.main_name, kernel.main_name);
  EXPECT_EQ(render_reference(matmul(), problem).hash, reference.hash);
  EXPECT_NE(render_reference(matmul(), matmul_problem(64, 64, 64, DType::f16, DType::f16)).hash,
            reference.hash);
}

// ---------------------------------------------------------------------------------------------
// template_hash and content_hash

TEST(TemplateHashTest, IsStableAnd32HexDigits) {
  std::string hash = template_hash(matmul());
  EXPECT_EQ(hash, template_hash(matmul()));
  EXPECT_EQ(hash.size(), 32u);
  EXPECT_TRUE(is_lowercase_hex(hash)) << hash;
  // Not the hash of any one rendered kernel: it names the templates, not a config.
  Problem problem = matmul_problem(4096, 4096, 4096);
  EXPECT_NE(hash, render(matmul(), tile_config(128, 128, 32, 2, 2, 4), problem).hash);
}

TEST(ContentHashTest, Is32LowercaseHexDigits) {
  for (const std::string& text : {std::string(), std::string("a"), std::string(10000, 'x')}) {
    std::string hash = content_hash(text);
    EXPECT_EQ(hash.size(), 32u);
    EXPECT_TRUE(is_lowercase_hex(hash)) << hash;
  }
}

TEST(ContentHashTest, LowLaneIsStandardFnv1a64) {
  // The low 64 bits are plain FNV-1a (offset basis cbf29ce484222325, prime 100000001b3), whose
  // published test vectors pin the implementation down.
  EXPECT_EQ(content_hash("").substr(16), "cbf29ce484222325");
  EXPECT_EQ(content_hash("a").substr(16), "af63dc4c8601ec8c");
  EXPECT_EQ(content_hash("foobar").substr(16), "85944171f73967e8");
  EXPECT_EQ(content_hash(""), "84222325cbf29ce4cbf29ce484222325");
}

TEST(ContentHashTest, EveryOneByteChangeChangesTheHash) {
  std::string text;
  for (int i = 0; i < 512; ++i) text += static_cast<char>('a' + (i * 7) % 26);
  const std::string original = content_hash(text);
  std::set<std::string> hashes = {original};
  for (std::size_t position = 0; position < text.size(); position += 17) {
    std::string changed = text;
    changed[position] = static_cast<char>(changed[position] ^ 1);
    hashes.insert(content_hash(changed));
  }
  std::string longer = text + '\0';
  hashes.insert(content_hash(longer));
  hashes.insert(content_hash(text.substr(1)));
  // Every variant differs from the original and from each other.
  std::size_t variants = (text.size() + 16) / 17 + 2;
  EXPECT_EQ(hashes.size(), variants + 1);
}

TEST(ContentHashTest, BothHalvesChangeWithTheInput) {
  std::string a = content_hash("block_m=128"), b = content_hash("block_m=256");
  EXPECT_NE(a.substr(0, 16), b.substr(0, 16));
  EXPECT_NE(a.substr(16), b.substr(16));
}

}  // namespace
}  // namespace tilesmith
