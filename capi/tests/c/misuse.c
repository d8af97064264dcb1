/*
 * misuse.c: pagoda's C ABI under wrong use. Every call must return the documented status
 * with a message, never crash. Runs on the simulated executor (the default model supplies
 * the tokenizer), under AddressSanitizer in scripts/test-capi.sh.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda.h"

static int failures = 0;

/* Checks a call's status and, on failure, that the message mentions `needle`. */
static void expect(const char *what, PagodaStatus got, PagodaStatus want, const char *needle) {
    const char *message = pagoda_last_error();
    bool ok = got == want;
    if (ok && want != PAGODA_STATUS_OK) {
        ok = message[0] != '\0' && (!needle || strstr(message, needle));
    }
    if (ok && want == PAGODA_STATUS_OK) {
        ok = message[0] == '\0';
    }
    if (!ok) {
        fprintf(stderr, "FAIL %s: status %d (want %d), message \"%s\"\n", what, (int)got, (int)want, message);
        failures++;
    }
}

/* What the test callback saw. */
typedef struct {
    PagodaEngine *engine;
    uint64_t abort_on_first_output;
    size_t outputs;
    size_t tokens;
    int finished[8];
    PagodaStatus abort_status;
    PagodaStatus nested_step_status;
} Seen;

static void record(void *user_data, const PagodaOutput *output) {
    Seen *seen = user_data;
    seen->outputs++;
    seen->tokens += output->num_token_ids;
    if (output->text[output->text_len] != '\0') {
        fprintf(stderr, "FAIL output text is not NUL-terminated\n");
        failures++;
    }
    if (output->request_id < 8 && output->finish_reason != PAGODA_FINISH_REASON_NONE) {
        seen->finished[output->request_id] = (int)output->finish_reason;
    }
    if (seen->abort_on_first_output != UINT64_MAX) {
        /* Calling back into the engine from its own callback is allowed, but stepping it
           there is refused. */
        seen->abort_status = pagoda_engine_abort(seen->engine, seen->abort_on_first_output);
        seen->nested_step_status = pagoda_engine_step(seen->engine, record, seen);
        seen->abort_on_first_output = UINT64_MAX;
    }
}

static void run_to_end(PagodaEngine *engine, Seen *seen) {
    bool unfinished = true;
    for (int steps = 0; unfinished && steps < 10000; steps++) {
        expect("step", pagoda_engine_step(engine, record, seen), PAGODA_STATUS_OK, NULL);
        expect("has_unfinished", pagoda_engine_has_unfinished(engine, &unfinished), PAGODA_STATUS_OK, NULL);
    }
}

int main(void) {
    PagodaEngine *engine = NULL;
    PagodaEngine *garbage = (PagodaEngine *)(uintptr_t)0xdeadbeef;
    uint64_t id = 0;
    bool flag = false;
    char *json = NULL;

    /* Creating: NULL out-pointer, bad JSON, unknown and ill-typed fields, missing model. */
    expect("new(out NULL)", pagoda_engine_new(NULL, NULL), PAGODA_STATUS_NULL_ARGUMENT, "out_engine");
    expect("new(bad JSON)", pagoda_engine_new("{not json", &engine), PAGODA_STATUS_INVALID_ARGUMENT, "engine options");
    expect("new(unknown field)", pagoda_engine_new("{\"num_gpu_blokcs\": 8}", &engine),
           PAGODA_STATUS_INVALID_ARGUMENT, "num_gpu_blokcs");
    expect("new(wrong type)", pagoda_engine_new("{\"max_num_seqs\": \"many\"}", &engine),
           PAGODA_STATUS_INVALID_ARGUMENT, "max_num_seqs");
    expect("new(bad executor)", pagoda_engine_new("{\"executor\": \"cuda\"}", &engine),
           PAGODA_STATUS_INVALID_ARGUMENT, "cuda");
    expect("new(missing model)", pagoda_engine_new("{\"model\": \"/nonexistent/model.gguf\"}", &engine),
           PAGODA_STATUS_MODEL, "/nonexistent/model.gguf");
    expect("new(LoRA limits without LoRA)", pagoda_engine_new("{\"executor\": \"sim\", \"max_loras\": 2}", &engine),
           PAGODA_STATUS_INVALID_ARGUMENT, "enable_lora");
    expect("new(bad block size)", pagoda_engine_new("{\"executor\": \"sim\", \"block_size\": 0}", &engine),
           PAGODA_STATUS_INVALID_ARGUMENT, NULL);
    if (engine != NULL) {
        fprintf(stderr, "FAIL a failed pagoda_engine_new wrote a handle\n");
        failures++;
    }

    /* NULL and garbage handles are rejected, never followed. */
    expect("add_text(NULL engine)", pagoda_engine_add_text(NULL, "hi", NULL, &id), PAGODA_STATUS_NULL_ARGUMENT, "engine");
    expect("step(NULL engine)", pagoda_engine_step(NULL, NULL, NULL), PAGODA_STATUS_NULL_ARGUMENT, "engine");
    expect("abort(NULL engine)", pagoda_engine_abort(NULL, 0), PAGODA_STATUS_NULL_ARGUMENT, "engine");
    expect("free(NULL engine)", pagoda_engine_free(NULL), PAGODA_STATUS_NULL_ARGUMENT, "engine");
    expect("add_text(garbage)", pagoda_engine_add_text(garbage, "hi", NULL, &id), PAGODA_STATUS_INVALID_HANDLE, "handle");
    expect("step(garbage)", pagoda_engine_step(garbage, NULL, NULL), PAGODA_STATUS_INVALID_HANDLE, "handle");
    expect("metrics(garbage)", pagoda_engine_metrics_json(garbage, &json), PAGODA_STATUS_INVALID_HANDLE, "handle");
    expect("load_lora(garbage)", pagoda_engine_load_lora(garbage, "sql", "/a"), PAGODA_STATUS_INVALID_HANDLE, "handle");
    expect("unload_lora(NULL engine)", pagoda_engine_unload_lora(NULL, "sql"), PAGODA_STATUS_NULL_ARGUMENT, "engine");
    expect("free(garbage)", pagoda_engine_free(garbage), PAGODA_STATUS_INVALID_HANDLE, "handle");

    expect("new(sim)", pagoda_engine_new("{\"executor\": \"sim\", \"max_model_len\": 64}", &engine), PAGODA_STATUS_OK, NULL);
    if (!engine) {
        fprintf(stderr, "FAIL no engine\n");
        return 1;
    }

    /* Bad requests: each refused with its reason, the engine unharmed. */
    expect("add_text(prompt NULL)", pagoda_engine_add_text(engine, NULL, NULL, &id), PAGODA_STATUS_NULL_ARGUMENT, "prompt");
    expect("add_text(out NULL)", pagoda_engine_add_text(engine, "hi", NULL, NULL), PAGODA_STATUS_NULL_ARGUMENT,
           "out_request_id");
    expect("add_text(bad UTF-8)", pagoda_engine_add_text(engine, "caf\xc3(", NULL, &id), PAGODA_STATUS_INVALID_ARGUMENT,
           "UTF-8");
    expect("add_text(bad params JSON)", pagoda_engine_add_text(engine, "hi", "{\"temperature\": }", &id),
           PAGODA_STATUS_INVALID_ARGUMENT, "sampling parameters");
    expect("add_text(params not an object)", pagoda_engine_add_text(engine, "hi", "[1, 2]", &id),
           PAGODA_STATUS_INVALID_ARGUMENT, "object");
    expect("add_text(unknown param)", pagoda_engine_add_text(engine, "hi", "{\"temprature\": 0}", &id),
           PAGODA_STATUS_INVALID_ARGUMENT, "temprature");
    expect("add_text(negative temperature)", pagoda_engine_add_text(engine, "hi", "{\"temperature\": -1}", &id),
           PAGODA_STATUS_INVALID_ARGUMENT, "temperature");
    expect("add_text(logit_bias past 100)", pagoda_engine_add_text(engine, "hi", "{\"logit_bias\": {\"3\": 101}}", &id),
           PAGODA_STATUS_INVALID_ARGUMENT, "logit_bias of token 3");
    expect("add_text(logit_bias out of vocabulary)",
           pagoda_engine_add_text(engine, "hi", "{\"logit_bias\": {\"1000000000\": 1}}", &id),
           PAGODA_STATUS_INVALID_ARGUMENT, "logit_bias token id 1000000000");
    expect("add_text(unclosed regex)",
           pagoda_engine_add_text(engine, "hi", "{\"structured_outputs\": {\"regex\": \"(a\"}}", &id),
           PAGODA_STATUS_INVALID_ARGUMENT, "regex");
    expect("add_text(two constraints)",
           pagoda_engine_add_text(engine, "hi", "{\"structured_outputs\": {\"regex\": \"a\", \"choice\": [\"a\"]}}", &id),
           PAGODA_STATUS_INVALID_ARGUMENT, "exactly one");
    uint32_t out_of_vocab[2] = {1, 1000000000u};
    expect("add_tokens(out of vocabulary)", pagoda_engine_add_tokens(engine, out_of_vocab, 2, NULL, &id),
           PAGODA_STATUS_INVALID_ARGUMENT, "1000000000");
    expect("add_tokens(NULL ids)", pagoda_engine_add_tokens(engine, NULL, 3, NULL, &id), PAGODA_STATUS_NULL_ARGUMENT,
           "token_ids");
    uint32_t long_prompt[100];
    for (int i = 0; i < 100; i++) {
        long_prompt[i] = 42;
    }
    expect("add_tokens(longer than max_model_len)", pagoda_engine_add_tokens(engine, long_prompt, 100, NULL, &id),
           PAGODA_STATUS_REJECTED, NULL);
    expect("add_tokens(empty)", pagoda_engine_add_tokens(engine, long_prompt, 0, NULL, &id), PAGODA_STATUS_REJECTED, NULL);
    expect("add_chat(not JSON)", pagoda_engine_add_chat(engine, "hello", NULL, &id), PAGODA_STATUS_INVALID_ARGUMENT,
           "chat messages");
    expect("add_chat(empty)", pagoda_engine_add_chat(engine, "[]", NULL, &id), PAGODA_STATUS_INVALID_ARGUMENT, "empty");
    expect("add_chat(no content)", pagoda_engine_add_chat(engine, "[{\"role\": \"user\"}]", NULL, &id),
           PAGODA_STATUS_INVALID_ARGUMENT, "content");
    /* LoRA on an engine created without it: refused as such, whatever the name or path. */
    expect("load_lora(LoRA off)", pagoda_engine_load_lora(engine, "sql", "/nonexistent/adapter"),
           PAGODA_STATUS_LORA_NOT_ENABLED, "--enable-lora");
    expect("unload_lora(LoRA off)", pagoda_engine_unload_lora(engine, "sql"), PAGODA_STATUS_LORA_NOT_ENABLED,
           "--enable-lora");
    expect("add_text(lora, LoRA off)", pagoda_engine_add_text(engine, "hi", "{\"lora\": \"sql\"}", &id),
           PAGODA_STATUS_LORA_NOT_ENABLED, "--enable-lora");
    expect("abort(unknown id)", pagoda_engine_abort(engine, 12345), PAGODA_STATUS_UNKNOWN_REQUEST, "12345");
    expect("has_unfinished(out NULL)", pagoda_engine_has_unfinished(engine, NULL), PAGODA_STATUS_NULL_ARGUMENT, NULL);
    expect("has_unfinished", pagoda_engine_has_unfinished(engine, &flag), PAGODA_STATUS_OK, NULL);
    if (flag) {
        fprintf(stderr, "FAIL refused requests left work behind\n");
        failures++;
    }

    /* Good requests after the bad ones: 0 runs out, 1 is aborted from inside the callback,
       2 is aborted between steps. */
    const char *params = "{\"temperature\": 0, \"max_tokens\": 6, \"ignore_eos\": true, \"stop\": null, "
                         "\"logit_bias\": null}";
    uint64_t ids[3];
    expect("add_text", pagoda_engine_add_text(engine, "Hello", params, &ids[0]), PAGODA_STATUS_OK, NULL);
    expect("add_chat", pagoda_engine_add_chat(engine, "[{\"role\": \"user\", \"content\": \"Hi\"}]", params, &ids[1]),
           PAGODA_STATUS_OK, NULL);
    uint32_t tokens[3] = {1, 2, 3};
    expect("add_tokens", pagoda_engine_add_tokens(engine, tokens, 3, params, &ids[2]), PAGODA_STATUS_OK, NULL);
    Seen seen = {.engine = engine,
                 .abort_on_first_output = ids[1],
                 .abort_status = PAGODA_STATUS_PANIC,
                 .nested_step_status = PAGODA_STATUS_OK};
    expect("abort(live)", pagoda_engine_abort(engine, ids[2]), PAGODA_STATUS_OK, NULL);
    expect("abort(twice)", pagoda_engine_abort(engine, ids[2]), PAGODA_STATUS_UNKNOWN_REQUEST, NULL);
    run_to_end(engine, &seen);
    if (seen.abort_status != PAGODA_STATUS_OK) {
        fprintf(stderr, "FAIL abort from inside the callback returned %d\n", (int)seen.abort_status);
        failures++;
    }
    if (seen.nested_step_status != PAGODA_STATUS_BUSY) {
        fprintf(stderr, "FAIL a step inside the callback returned %d\n", (int)seen.nested_step_status);
        failures++;
    }
    if (seen.finished[ids[0]] != PAGODA_FINISH_REASON_LENGTH || seen.finished[ids[1]] != PAGODA_FINISH_REASON_ABORT ||
        seen.finished[ids[2]] != PAGODA_FINISH_REASON_ABORT) {
        fprintf(stderr, "FAIL finish reasons %d %d %d\n", seen.finished[ids[0]], seen.finished[ids[1]],
                seen.finished[ids[2]]);
        failures++;
    }

    /* Metrics: caller-owned JSON. */
    expect("metrics(out NULL)", pagoda_engine_metrics_json(engine, NULL), PAGODA_STATUS_NULL_ARGUMENT, "out_json");
    expect("metrics", pagoda_engine_metrics_json(engine, &json), PAGODA_STATUS_OK, NULL);
    if (!json || !strstr(json, "\"generation_tokens\"")) {
        fprintf(stderr, "FAIL metrics JSON: %s\n", json ? json : "(null)");
        failures++;
    }
    pagoda_string_free(json);
    pagoda_string_free(NULL);

    /* Freeing: once succeeds; twice, or any use after, is detected. */
    expect("free", pagoda_engine_free(engine), PAGODA_STATUS_OK, NULL);
    expect("free(twice)", pagoda_engine_free(engine), PAGODA_STATUS_INVALID_HANDLE, "already freed");
    expect("step(freed)", pagoda_engine_step(engine, record, &seen), PAGODA_STATUS_INVALID_HANDLE, NULL);
    expect("add_text(freed)", pagoda_engine_add_text(engine, "hi", NULL, &id), PAGODA_STATUS_INVALID_HANDLE, NULL);

    if (strlen(pagoda_version()) == 0) {
        fprintf(stderr, "FAIL empty version\n");
        failures++;
    }
    printf("misuse: %s\n", failures ? "FAILED" : "all checks passed");
    return failures ? 1 : 0;
}
