// Published chat templates rendered against fixed conversations. Templates are copied from the
// models' tokenizer_config.json (Phi-3's is read from a real GGUF); expected strings follow
// transformers' apply_chat_template (Jinja2 with trim_blocks and lstrip_blocks).
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "chat/chat_template.h"
#include "common/test_paths.h"
#include "format/gguf.h"

namespace peregrine {
namespace {

const std::vector<ChatMessage> kWithSystem = {
    {"system", "You are a helpful assistant"},
    {"user", "Hello"},
    {"assistant", "Hi there"},
    {"user", "Who are you"},
    {"assistant", "   I am an assistant   "},
    {"user", "Another question"},
};
const std::vector<ChatMessage> kNoSystem(kWithSystem.begin() + 1, kWithSystem.end());

std::string render(std::string_view tmpl, const std::vector<ChatMessage>& msgs, bool gen,
                   std::string_view bos = "<s>", std::string_view eos = "</s>") {
  return ChatTemplate::parse(tmpl).render(msgs, gen, bos, eos);
}

// The message of the ChatTemplateError that rendering throws ("" if it does not throw).
std::string render_error(std::string_view tmpl, const std::vector<ChatMessage>& msgs) {
  try {
    render(tmpl, msgs, true);
  } catch (const ChatTemplateError& e) {
    return e.what();
  }
  return "";
}

// ---- meta-llama/Llama-2-7b-chat-hf ----
constexpr std::string_view kLlama2 =
    R"TPL({% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\n' + system_message + '\n<</SYS>>\n\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %})TPL";

TEST(RealTemplates, Llama2) {
  EXPECT_EQ(render(kLlama2, kWithSystem, true),
            "<s>[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST] Hi there "
            "</s><s>[INST] Who are you [/INST] I am an assistant </s><s>[INST] Another question "
            "[/INST]");
  EXPECT_EQ(render(kLlama2, kNoSystem, false),
            "<s>[INST] Hello [/INST] Hi there </s><s>[INST] Who are you [/INST] I am an assistant "
            "</s><s>[INST] Another question [/INST]");
  EXPECT_EQ(render_error(kLlama2, {{"user", "a"}, {"user", "b"}}),
            "Conversation roles must alternate user/assistant/user/assistant/...");
}

// ---- meta-llama/Meta-Llama-3-8B-Instruct ----
constexpr std::string_view kLlama3 =
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim "
    "+ '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif "
    "%}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
    "'<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}";

constexpr std::string_view kLlama3Turns =
    "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\nI am an assistant<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\nAnother question<|eot_id|>";

TEST(RealTemplates, Llama3) {
  const std::string bos = "<|begin_of_text|>";
  const std::string sys =
      "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>";
  const std::string gen = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(render(kLlama3, kWithSystem, true, bos, "<|eot_id|>"),
            bos + sys + std::string(kLlama3Turns) + gen);
  EXPECT_EQ(render(kLlama3, kNoSystem, false, bos, "<|eot_id|>"), bos + std::string(kLlama3Turns));
}

// ---- meta-llama/Llama-3.1-8B-Instruct (tools, builtin_tools, date_string branches) ----
constexpr std::string_view kLlama31 = R"TPL({{- bos_token }}
{%- if custom_tools is defined %}
    {%- set tools = custom_tools %}
{%- endif %}
{%- if not tools_in_user_message is defined %}
    {%- set tools_in_user_message = true %}
{%- endif %}
{%- if not date_string is defined %}
    {%- set date_string = "26 Jul 2024" %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}

{#- This block extracts the system message, so we can slot it into the right place. #}
{%- if messages[0]['role'] == 'system' %}
    {%- set system_message = messages[0]['content']|trim %}
    {%- set messages = messages[1:] %}
{%- else %}
    {%- set system_message = "" %}
{%- endif %}

{#- System message + builtin tools #}
{{- "<|start_header_id|>system<|end_header_id|>\n\n" }}
{%- if builtin_tools is defined or tools is not none %}
    {{- "Environment: ipython\n" }}
{%- endif %}
{%- if builtin_tools is defined %}
    {{- "Tools: " + builtin_tools | reject('equalto', 'code_interpreter') | join(", ") + "\n\n"}}
{%- endif %}
{{- "Cutting Knowledge Date: December 2023\n" }}
{{- "Today Date: " + date_string + "\n\n" }}
{%- if tools is not none and not tools_in_user_message %}
    {{- "You have access to the following functions. To call a function, please respond with JSON for a function call." }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
{%- endif %}
{{- system_message }}
{{- "<|eot_id|>" }}

{#- Custom tools are passed in a user message with some extra guidance #}
{%- if tools_in_user_message and not tools is none %}
    {#- Extract the first user message so we can plug it in here #}
    {%- if messages | length != 0 %}
        {%- set first_user_message = messages[0]['content']|trim %}
        {%- set messages = messages[1:] %}
    {%- else %}
        {{- raise_exception("Cannot put tools in the first user message when there's no first user message!") }}
{%- endif %}
    {{- '<|start_header_id|>user<|end_header_id|>\n\n' -}}
    {{- "Given the following functions, please respond with a JSON for a function call " }}
    {{- "with its proper arguments that best answers the given prompt.\n\n" }}
    {{- 'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}.' }}
    {{- "Do not use variables.\n\n" }}
    {%- for t in tools %}
        {{- t | tojson(indent=4) }}
        {{- "\n\n" }}
    {%- endfor %}
    {{- first_user_message + "<|eot_id|>"}}
{%- endif %}

{%- for message in messages %}
    {%- if not (message.role == 'ipython' or message.role == 'tool' or 'tool_calls' in message) %}
        {{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' }}
    {%- elif 'tool_calls' in message %}
        {%- if not message.tool_calls|length == 1 %}
            {{- raise_exception("This model only supports single tool-calls at once!") }}
        {%- endif %}
        {%- set tool_call = message.tool_calls[0].function %}
        {%- if builtin_tools is defined and tool_call.name in builtin_tools %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- "<|python_tag|>" + tool_call.name + ".call(" }}
            {%- for arg_name, arg_val in tool_call.arguments | items %}
                {{- arg_name + '="' + arg_val + '"' }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- endif %}
                {%- endfor %}
            {{- ")" }}
        {%- else  %}
            {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' -}}
            {{- '{"name": "' + tool_call.name + '", ' }}
            {{- '"parameters": ' }}
            {{- tool_call.arguments | tojson }}
            {{- "}" }}
        {%- endif %}
        {%- if builtin_tools is defined %}
            {#- This means we're in ipython mode #}
            {{- "<|eom_id|>" }}
        {%- else %}
            {{- "<|eot_id|>" }}
        {%- endif %}
    {%- elif message.role == "tool" or message.role == "ipython" %}
        {{- "<|start_header_id|>ipython<|end_header_id|>\n\n" }}
        {%- if message.content is mapping or message.content is iterable %}
            {{- message.content | tojson }}
        {%- else %}
            {{- message.content }}
        {%- endif %}
        {{- "<|eot_id|>" }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{%- endif %}
)TPL";

TEST(RealTemplates, Llama31) {
  const std::string head =
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n"
      "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n";
  const std::string gen = "<|start_header_id|>assistant<|end_header_id|>\n\n";
  EXPECT_EQ(render(kLlama31, kWithSystem, true, "<|begin_of_text|>", "<|eot_id|>"),
            head + "You are a helpful assistant<|eot_id|>" + std::string(kLlama3Turns) + gen);
  EXPECT_EQ(render(kLlama31, kNoSystem, false, "<|begin_of_text|>", "<|eot_id|>"),
            head + "<|eot_id|>" + std::string(kLlama3Turns));
}

// ---- mistralai/Mistral-7B-Instruct-v0.1 / v0.2 ----
constexpr std::string_view kMistralV1 =
    R"TPL({{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %})TPL";

TEST(RealTemplates, MistralV01) {
  EXPECT_EQ(render(kMistralV1, kNoSystem, true),
            "<s>[INST] Hello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an assistant   "
            "</s>[INST] Another question [/INST]");
  EXPECT_EQ(render_error(kMistralV1, kWithSystem),
            "Conversation roles must alternate user/assistant/user/assistant/...");
  EXPECT_EQ(render_error(kMistralV1, {{"user", "a"}, {"system", "b"}}),
            "Only user and assistant roles are supported!");
}

// ---- mistralai/Mistral-7B-Instruct-v0.3 (the "v3" template: selectattr, namespace, tools) ----
constexpr std::string_view kMistralV3 = R"TPL({%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}
{%- if not tools is defined %}
    {%- set tools = none %}
{%- endif %}
{%- set user_messages = loop_messages | selectattr("role", "equalto", "user") | list %}

{#- This block checks for alternating user/assistant messages, skipping tool calling messages #}
{%- set ns = namespace() %}
{%- set ns.index = 0 %}
{%- for message in loop_messages %}
    {%- if not (message.role == "tool" or message.role == "tool_results" or (message.tool_calls is defined and message.tool_calls is not none)) %}
        {%- if (message["role"] == "user") != (ns.index % 2 == 0) %}
            {{- raise_exception("After the optional system message, conversation roles must alternate user/assistant/user/assistant/...") }}
        {%- endif %}
        {%- set ns.index = ns.index + 1 %}
    {%- endif %}
{%- endfor %}

{{- bos_token }}
{%- for message in loop_messages %}
    {%- if message["role"] == "user" %}
        {%- if tools is not none and (message == user_messages[-1]) %}
            {{- "[AVAILABLE_TOOLS] [" }}
            {%- for tool in tools %}
                {%- set tool = tool.function %}
                {{- '{"type": "function", "function": {' }}
                {%- for key, val in tool.items() if key != "return" %}
                    {%- if val is string %}
                        {{- '"' + key + '": "' + val + '"' }}
                    {%- else %}
                        {{- '"' + key + '": ' + val|tojson }}
                    {%- endif %}
                    {%- if not loop.last %}
                        {{- ", " }}
                    {%- endif %}
                {%- endfor %}
                {{- "}}" }}
                {%- if not loop.last %}
                    {{- ", " }}
                {%- else %}
                    {{- "]" }}
                {%- endif %}
            {%- endfor %}
            {{- "[/AVAILABLE_TOOLS]" }}
            {%- endif %}
        {%- if loop.last and system_message is defined %}
            {{- "[INST] " + system_message + "\n\n" + message["content"] + "[/INST]" }}
        {%- else %}
            {{- "[INST] " + message["content"] + "[/INST]" }}
        {%- endif %}
    {%- elif message.tool_calls is defined and message.tool_calls is not none %}
        {{- "[TOOL_CALLS] [" }}
        {%- for tool_call in message.tool_calls %}
            {%- set out = tool_call.function|tojson %}
            {{- out[:-1] }}
            {%- if not tool_call.id is defined or tool_call.id|length != 9 %}
                {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
            {%- endif %}
            {{- ', "id": "' + tool_call.id + '"}' }}
            {%- if not loop.last %}
                {{- ", " }}
            {%- else %}
                {{- "]" + eos_token }}
            {%- endif %}
        {%- endfor %}
    {%- elif message["role"] == "assistant" %}
        {{- " " + message["content"]|trim + eos_token}}
    {%- elif message["role"] == "tool_results" or message["role"] == "tool" %}
        {%- if message.content is defined and message.content.content is defined %}
            {%- set content = message.content.content %}
        {%- else %}
            {%- set content = message.content %}
        {%- endif %}
        {{- '[TOOL_RESULTS] {"content": ' + content|string + ", " }}
        {%- if not message.tool_call_id is defined or message.tool_call_id|length != 9 %}
            {{- raise_exception("Tool call IDs should be alphanumeric strings with length 9!") }}
        {%- endif %}
        {{- '"call_id": "' + message.tool_call_id + '"}[/TOOL_RESULTS]' }}
    {%- else %}
        {{- raise_exception("Only user and assistant roles are supported, with the exception of an initial optional system message!") }}
    {%- endif %}
{%- endfor %}
)TPL";

TEST(RealTemplates, MistralV03) {
  EXPECT_EQ(render(kMistralV3, kWithSystem, true),
            "<s>[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>"
            "[INST] You are a helpful assistant\n\nAnother question[/INST]");
  EXPECT_EQ(render(kMistralV3, kNoSystem, true),
            "<s>[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>"
            "[INST] Another question[/INST]");
  EXPECT_EQ(render_error(kMistralV3, {{"assistant", "a"}}),
            "After the optional system message, conversation roles must alternate "
            "user/assistant/user/assistant/...");
}

// ---- Qwen/Qwen2-7B-Instruct (ChatML with a default system message) ----
constexpr std::string_view kQwen2 =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' "
    "+ message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

constexpr std::string_view kChatMLTurns =
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n"
    "<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an assistant   "
    "<|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n";

TEST(RealTemplates, Qwen2) {
  const std::string gen = "<|im_start|>assistant\n";
  EXPECT_EQ(render(kQwen2, kWithSystem, true, "", "<|im_end|>"),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n" +
                std::string(kChatMLTurns) + gen);
  EXPECT_EQ(render(kQwen2, kNoSystem, false, "", "<|im_end|>"),
            "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n" +
                std::string(kChatMLTurns));
}

// ---- microsoft/Phi-3-mini, read from a real GGUF's tokenizer.chat_template ----
TEST(RealTemplates, Phi3FromGguf) {
  ModelFile file = read_gguf(test::shared_file("tokenizers/ggml-vocab-phi-3.gguf"));
  std::string tmpl = file.meta.get_string("tokenizer.chat_template");
  const std::string turns =
      "<s><|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are "
      "you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother "
      "question<|end|>\n<|assistant|>\n";
  // This Phi-3 template drops system messages and always opens the assistant turn.
  EXPECT_EQ(render(tmpl, kWithSystem, true), turns);
  EXPECT_EQ(render(tmpl, kNoSystem, false), turns);
}

// ---- google/gemma-2-2b-it ----
constexpr std::string_view kGemma =
    "{{ bos_token }}{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not "
    "supported') }}{% endif %}{% for message in messages %}{% if (message['role'] == 'user') != "
    "(loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate "
    "user/assistant/user/assistant/...') }}{% endif %}{% if (message['role'] == 'assistant') %}{% "
    "set role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ "
    "'<start_of_turn>' + role + '\n' + message['content'] | trim + '<end_of_turn>\n' }}{% endfor "
    "%}{% if add_generation_prompt %}{{'<start_of_turn>model\n'}}{% endif %}";

TEST(RealTemplates, Gemma) {
  const std::string turns =
      "<bos><start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi "
      "there<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI "
      "am an assistant<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n";
  EXPECT_EQ(render(kGemma, kNoSystem, true, "<bos>", "<eos>"), turns + "<start_of_turn>model\n");
  EXPECT_EQ(render(kGemma, kNoSystem, false, "<bos>", "<eos>"), turns);
  EXPECT_EQ(render_error(kGemma, kWithSystem), "System role not supported");
  EXPECT_EQ(render_error(kGemma, {{"user", "a"}, {"user", "b"}}),
            "Conversation roles must alternate user/assistant/user/assistant/...");
}

// ---- HuggingFaceH4/zephyr-7b-beta (relies on trim_blocks: newlines after tags) ----
constexpr std::string_view kZephyr =
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n{{ '<|user|>\n' + "
    "message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n{{ '<|system|>\n' "
    "+ message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ "
    "'<|assistant|>\n'  + message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and "
    "add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}";

TEST(RealTemplates, Zephyr) {
  const std::string turns =
      "<|user|>\nHello</s>\n<|assistant|>\nHi there</s>\n<|user|>\nWho are you</s>\n"
      "<|assistant|>\n   I am an assistant   </s>\n<|user|>\nAnother question</s>\n";
  EXPECT_EQ(render(kZephyr, kWithSystem, true),
            "<|system|>\nYou are a helpful assistant</s>\n" + turns + "<|assistant|>\n");
  EXPECT_EQ(render(kZephyr, kNoSystem, false), turns);
}

TEST(RealTemplates, FallbackIsChatML) {
  ChatTemplate t = ChatTemplate::fallback();
  EXPECT_EQ(t.render(kNoSystem, true, "<s>", "</s>"),
            std::string(kChatMLTurns) + "<|im_start|>assistant\n");
  EXPECT_EQ(t.render(kWithSystem, false, "", ""),
            "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n" + std::string(kChatMLTurns));
  // Copies share the parsed program and render the same.
  ChatTemplate copy = t;
  EXPECT_EQ(copy.render(kNoSystem, true, "", ""), t.render(kNoSystem, true, "", ""));
}

TEST(RealTemplates, EmptyConversation) {
  EXPECT_EQ(ChatTemplate::fallback().render({}, true, "", ""), "<|im_start|>assistant\n");
  // Templates that index messages[0] see undefined, not a crash.
  EXPECT_EQ(render(kLlama2, {}, true), "");
  EXPECT_EQ(render(kQwen2, {}, true), "<|im_start|>assistant\n");
}

// A long conversation renders in well under a second (the server renders every request).
TEST(RealTemplates, LongConversationIsFast) {
  std::vector<ChatMessage> msgs = {{"system", "You are terse."}};
  for (int i = 0; i < 2000; ++i)
    msgs.push_back({i % 2 ? "assistant" : "user", std::string(2000, static_cast<char>('a' + i % 26))});
  auto t0 = std::chrono::steady_clock::now();
  std::string out = render(kLlama31, msgs, true, "<|begin_of_text|>", "<|eot_id|>");
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(out.size(), size_t{2000} * 2000);
  EXPECT_LT(ms, 2000.0);
  std::printf("Llama 3.1 template, 2001 messages (%zu bytes out): %.1f ms\n", out.size(), ms);
}

}  // namespace
}  // namespace peregrine
