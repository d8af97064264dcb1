/*
 * lora.c: a LoRA adapter through pagoda's C ABI, and its refusals.
 *
 *   lora MODEL_DIR ADAPTER_DIR MISFIT_FILE "PROMPT" MAX_TOKENS
 *
 * Loads ADAPTER_DIR as "sql" into an engine over MODEL_DIR, runs PROMPT greedily with the
 * adapter and without it in one batch, and prints each completion's token ids on a line of
 * its own ("lora ..." and "base ..."); scripts/test-capi.sh checks the adapter's ids against
 * `pagoda generate --lora`. Every refusal (a missing path, a file that is no adapter, a name
 * loaded twice, an unknown name, an adapter in use) must come with its status and a message.
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
    bool ok = got == want && (want == PAGODA_STATUS_OK || (message[0] != '\0' && (!needle || strstr(message, needle))));
    if (!ok) {
        fprintf(stderr, "FAIL %s: status %d (want %d), message \"%s\"\n", what, (int)got, (int)want, message);
        failures++;
    }
}

#define MAX_IDS 256

/* The token ids of requests 0..3. */
typedef struct {
    uint32_t ids[4][MAX_IDS];
    size_t len[4];
} Completions;

static void collect(void *user_data, const PagodaOutput *output) {
    Completions *completions = user_data;
    if (output->request_id >= 4) {
        return;
    }
    size_t *len = &completions->len[output->request_id];
    for (size_t i = 0; i < output->num_token_ids && *len < MAX_IDS; i++) {
        completions->ids[output->request_id][(*len)++] = output->token_ids[i];
    }
}

static void run_to_end(PagodaEngine *engine, Completions *completions) {
    bool unfinished = true;
    for (int steps = 0; unfinished && steps < 10000; steps++) {
        expect("step", pagoda_engine_step(engine, collect, completions), PAGODA_STATUS_OK, NULL);
        expect("has_unfinished", pagoda_engine_has_unfinished(engine, &unfinished), PAGODA_STATUS_OK, NULL);
    }
}

static void print_ids(const char *label, const uint32_t *ids, size_t len) {
    printf("%s", label);
    for (size_t i = 0; i < len; i++) {
        printf(" %u", ids[i]);
    }
    printf("\n");
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: lora MODEL_DIR ADAPTER_DIR MISFIT_FILE PROMPT MAX_TOKENS\n");
        return 2;
    }
    const char *model = argv[1], *adapter = argv[2], *misfit = argv[3], *prompt = argv[4];
    int max_tokens = atoi(argv[5]);
    char options[4096];
    snprintf(options, sizeof options,
             "{\"model\": \"%s\", \"seed\": 1, \"num_gpu_blocks\": 64, \"enable_lora\": true, \"max_loras\": 1, "
             "\"max_lora_rank\": 8}",
             model);
    PagodaEngine *engine = NULL;
    expect("new", pagoda_engine_new(options, &engine), PAGODA_STATUS_OK, NULL);
    if (!engine) {
        return 1;
    }

    expect("load_lora(NULL engine)", pagoda_engine_load_lora(NULL, "sql", adapter), PAGODA_STATUS_NULL_ARGUMENT,
           "engine");
    expect("load_lora(name NULL)", pagoda_engine_load_lora(engine, NULL, adapter), PAGODA_STATUS_NULL_ARGUMENT, "name");
    expect("load_lora(path NULL)", pagoda_engine_load_lora(engine, "sql", NULL), PAGODA_STATUS_NULL_ARGUMENT, "path");
    expect("load_lora(missing path)", pagoda_engine_load_lora(engine, "sql", "/nonexistent/adapter"),
           PAGODA_STATUS_NOT_FOUND, "/nonexistent/adapter");
    expect("load_lora(a model, not an adapter)", pagoda_engine_load_lora(engine, "misfit", misfit),
           PAGODA_STATUS_MODEL, "general.type");
    expect("load_lora(empty name)", pagoda_engine_load_lora(engine, "", adapter), PAGODA_STATUS_INVALID_ARGUMENT, NULL);
    expect("load_lora", pagoda_engine_load_lora(engine, "sql", adapter), PAGODA_STATUS_OK, NULL);
    expect("load_lora(twice)", pagoda_engine_load_lora(engine, "sql", adapter), PAGODA_STATUS_INVALID_ARGUMENT,
           "already loaded");

    uint64_t id = 0;
    expect("add_text(unknown adapter)", pagoda_engine_add_text(engine, prompt, "{\"lora\": \"nope\"}", &id),
           PAGODA_STATUS_UNKNOWN_LORA, "nope");
    expect("add_text(lora not a name)", pagoda_engine_add_text(engine, prompt, "{\"lora\": 3}", &id),
           PAGODA_STATUS_INVALID_ARGUMENT, "lora");
    expect("unload_lora(unknown)", pagoda_engine_unload_lora(engine, "nope"), PAGODA_STATUS_UNKNOWN_LORA, "nope");

    /* The adapter's and the base model's greedy completions, batched together. */
    char params[256], base_params[256];
    snprintf(params, sizeof params,
             "{\"temperature\": 0, \"max_tokens\": %d, \"ignore_eos\": true, \"lora\": \"sql\"}", max_tokens);
    snprintf(base_params, sizeof base_params,
             "{\"temperature\": 0, \"max_tokens\": %d, \"ignore_eos\": true, \"lora\": null}", max_tokens);
    uint64_t lora_id = 0, base_id = 0;
    expect("add_text(lora)", pagoda_engine_add_text(engine, prompt, params, &lora_id), PAGODA_STATUS_OK, NULL);
    expect("add_text(base)", pagoda_engine_add_text(engine, prompt, base_params, &base_id), PAGODA_STATUS_OK, NULL);
    expect("unload_lora(in use)", pagoda_engine_unload_lora(engine, "sql"), PAGODA_STATUS_BUSY, "in use");
    static Completions completions;
    run_to_end(engine, &completions);
    if (lora_id >= 4 || base_id >= 4 || completions.len[lora_id] != (size_t)max_tokens ||
        completions.len[base_id] != (size_t)max_tokens) {
        fprintf(stderr, "FAIL expected %d tokens from each request\n", max_tokens);
        failures++;
    } else if (memcmp(completions.ids[lora_id], completions.ids[base_id], max_tokens * sizeof(uint32_t)) == 0) {
        fprintf(stderr, "FAIL the adapter did not change the completion\n");
        failures++;
    }

    /* Per-adapter counters in the metrics. */
    char *json = NULL;
    expect("metrics", pagoda_engine_metrics_json(engine, &json), PAGODA_STATUS_OK, NULL);
    if (!json || !strstr(json, "\"per_lora\":{\"sql\":{")) {
        fprintf(stderr, "FAIL metrics JSON has no counters for \"sql\": %s\n", json ? json : "(null)");
        failures++;
    }
    pagoda_string_free(json);

    expect("unload_lora", pagoda_engine_unload_lora(engine, "sql"), PAGODA_STATUS_OK, NULL);
    expect("unload_lora(twice)", pagoda_engine_unload_lora(engine, "sql"), PAGODA_STATUS_UNKNOWN_LORA, "sql");
    expect("add_text(unloaded adapter)", pagoda_engine_add_text(engine, prompt, params, &id),
           PAGODA_STATUS_UNKNOWN_LORA, "sql");
    expect("free", pagoda_engine_free(engine), PAGODA_STATUS_OK, NULL);

    if (failures) {
        fprintf(stderr, "lora: %d checks FAILED\n", failures);
        return 1;
    }
    print_ids("lora", completions.ids[lora_id], completions.len[lora_id]);
    print_ids("base", completions.ids[base_id], completions.len[base_id]);
    return 0;
}
