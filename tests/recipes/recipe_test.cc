#include "lua/recipe.h"

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "lua/state.h"

extern "C" {
#include "lauxlib.h"
}

namespace colossal::lua {
namespace {

std::string Testdata(const std::string& name) { return "lua/testdata/" + name; }

std::string Field(lua_State* L, const char* key) {
  lua_getfield(L, -1, key);
  std::string out = luaL_tolstring(L, -1, nullptr);
  lua_pop(L, 2);
  return out;
}

class RecipeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_PROCID",
                          "OMPI_COMM_WORLD_RANK"}) {
      unsetenv(v);
    }
    auto s = NewState();
    ASSERT_TRUE(s.ok()) << s.status();
    state_ = std::move(*s);
    L = state_.get();
  }
  LuaState state_;
  lua_State* L = nullptr;
};

TEST_F(RecipeTest, SandboxAndModule) {
  ASSERT_TRUE(LoadRecipe(L, Testdata("sandbox.lua")).ok());
  EXPECT_EQ(Field(L, "version"), kVersion);
  EXPECT_EQ(Field(L, "rank"), "0");
  EXPECT_EQ(Field(L, "world_size"), "1");
  EXPECT_EQ(Field(L, "local_rank"), "0");
  EXPECT_EQ(Field(L, "has_io"), "false");
  EXPECT_EQ(Field(L, "has_os"), "false");
  EXPECT_EQ(Field(L, "has_dofile"), "false");
  const std::string device = Field(L, "device");
  EXPECT_TRUE(device == "cpu" || device == "cuda:0") << device;
}

TEST_F(RecipeTest, EnvFollowsTorchrunVariables) {
  setenv("RANK", "3", 1);
  setenv("WORLD_SIZE", "4", 1);
  setenv("LOCAL_RANK", "1", 1);
  ASSERT_EQ(luaL_dostring(L, "local e = require('colossal').env() "
                             "return e.rank .. '/' .. e.world_size .. '/' .. e.local_rank"),
            LUA_OK);
  EXPECT_STREQ(lua_tostring(L, -1), "3/4/1");
  setenv("RANK", "x", 1);
  ASSERT_NE(luaL_dostring(L, "return require('colossal').env()"), LUA_OK);
  // The module's errors are {message, code} tables whose tostring is the message.
  const std::string message = luaL_tolstring(L, -1, nullptr);
  EXPECT_NE(message.find("RANK='x'"), std::string::npos) << message;
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK"}) unsetenv(v);
}

TEST_F(RecipeTest, RequireFindsNothingOnDisk) {
  ASSERT_NE(luaL_dostring(L, "return require('os')"), LUA_OK);
}

TEST_F(RecipeTest, SyntaxErrorNamesFileAndLine) {
  absl::Status s = LoadRecipe(L, Testdata("syntax_error.lua"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("lua/testdata/syntax_error.lua:4:", 0), 0u) << s.message();
  EXPECT_EQ(lua_gettop(L), 0);
}

TEST_F(RecipeTest, RuntimeErrorNamesFileAndLine) {
  absl::Status s = LoadRecipe(L, Testdata("runtime_error.lua"));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("lua/testdata/runtime_error.lua:3:", 0), 0u) << s.message();
  EXPECT_NE(s.message().find("stack traceback"), absl::string_view::npos);
  EXPECT_EQ(lua_gettop(L), 0);
}

TEST_F(RecipeTest, NotATableOrMissing) {
  absl::Status s = LoadRecipe(L, Testdata("not_a_table.lua"));
  EXPECT_NE(s.message().find("must return a table"), absl::string_view::npos) << s.message();
  EXPECT_NE(s.message().find("returned number"), absl::string_view::npos) << s.message();
  s = LoadRecipe(L, Testdata("absent.lua"));
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_NE(s.message().find("cannot open lua/testdata/absent.lua"), absl::string_view::npos)
      << s.message();
  s = LoadRecipe(L, "lua/testdata");  // there, but a folder
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(lua_gettop(L), 0);
}

TEST_F(RecipeTest, Overrides) {
  ASSERT_TRUE(LoadRecipe(L, Testdata("sandbox.lua")).ok());
  ASSERT_TRUE(ApplyOverride(L, -1, "nested.lr=3e-4").ok());
  ASSERT_TRUE(ApplyOverride(L, -1, "nested.steps=20").ok());
  ASSERT_TRUE(ApplyOverride(L, -1, "nested.name=a=b").ok());
  ASSERT_TRUE(ApplyOverride(L, -1, "nested.on=true").ok());
  lua_getfield(L, -1, "nested");
  EXPECT_EQ(Field(L, "lr"), "0.0003");
  EXPECT_EQ(Field(L, "steps"), "20");
  EXPECT_EQ(Field(L, "name"), "a=b");
  EXPECT_EQ(Field(L, "on"), "true");
  lua_pop(L, 1);
  EXPECT_EQ(ApplyOverride(L, -1, "nested.lrr=1").message(),
            "--set nested.lrr: the recipe has no key 'nested.lrr'; did you mean \"lr\"?");
  EXPECT_EQ(ApplyOverride(L, -1, "nested.steps=ten").message(),
            "--set nested.steps: wants a number, got 'ten'");
  EXPECT_EQ(ApplyOverride(L, -1, "nested.on=yes").message(),
            "--set nested.on: wants true or false, got 'yes'");
  EXPECT_EQ(ApplyOverride(L, -1, "rank.x=1").message(),
            "--set rank.x: 'rank' is a number, not a table");
  EXPECT_NE(ApplyOverride(L, -1, "nested=1").message().find("set one of its keys"),
            absl::string_view::npos);
  EXPECT_NE(ApplyOverride(L, -1, "novalue").message().find("wants key=value"),
            absl::string_view::npos);
  // A list's entries by position (optimizer.betas.2=0.99), only those it has.
  ASSERT_TRUE(ApplyOverride(L, -1, "nested.betas.2=0.99").ok());
  lua_getfield(L, -1, "nested");
  lua_getfield(L, -1, "betas");
  EXPECT_EQ(Field(L, "1"), "nil");  // positions are integer keys, not strings
  lua_geti(L, -1, 2);
  EXPECT_EQ(lua_tonumber(L, -1), 0.99);
  lua_pop(L, 3);
  EXPECT_EQ(ApplyOverride(L, -1, "nested.betas.3=1").message(),
            "--set nested.betas.3: the recipe has no key 'nested.betas.3'");
  EXPECT_EQ(ApplyOverride(L, -1, "nested.betas.0=1").message(),
            "--set nested.betas.0: the recipe has no key 'nested.betas.0'");
  EXPECT_EQ(lua_gettop(L), 1);
}

TEST_F(RecipeTest, ShippedRecipesLoad) {
  for (const char* name : {"recipes/gpt2_zero.lua", "recipes/gpt2_single.lua", "recipes/gpt2_ddp.lua",
                           "recipes/gpt2_fp16.lua", "recipes/gpt2_gemini.lua",
                           "recipes/gpt2_hybrid.lua", "recipes/llama_finetune.lua",
                           "recipes/llama_hybrid.lua"}) {
    absl::Status s = LoadRecipe(L, name);
    ASSERT_TRUE(s.ok()) << name << ": " << s;
    EXPECT_NE(Field(L, "steps"), "nil") << name;
    lua_getfield(L, -1, "optimizer");
    EXPECT_TRUE(lua_istable(L, -1)) << name;
    lua_settop(L, 0);
  }
  ASSERT_TRUE(LoadRecipe(L, "recipes/gpt2_zero.lua").ok());
  lua_getfield(L, -1, "plugin");
  EXPECT_EQ(Field(L, "name"), "low_level_zero");
  EXPECT_EQ(Field(L, "stage"), "2");
}

}  // namespace
}  // namespace colossal::lua
