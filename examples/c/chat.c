/*
 * chat.c: load the default model through pagoda's C ABI and stream one answer.
 *
 *   chat ["QUESTION" [MAX_TOKENS]]
 *
 * The question goes to the model as a single user message in its chat template; the
 * answer is greedy (temperature 0) and printed as it is generated. PAGODA_MODEL_GGUF names
 * another model file. scripts/test-capi.sh builds and runs it.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda.h"

/* Prints the failed call and pagoda's message, then exits. */
static void check(PagodaStatus status, const char *call) {
    if (status != PAGODA_STATUS_OK) {
        fprintf(stderr, "chat: %s failed (status %d): %s\n", call, (int)status, pagoda_last_error());
        exit(1);
    }
}

/* ANCHOR: callback */
/* Writes each piece of the answer as it arrives. */
static void print_output(void *user_data, const PagodaOutput *output) {
    (void)user_data;
    fwrite(output->text, 1, output->text_len, stdout);
    fflush(stdout);
}
/* ANCHOR_END: callback */

/* The text as a JSON string literal, quotes included; the caller frees it. */
static char *json_string(const char *text) {
    char *out = malloc(strlen(text) * 6 + 3);
    char *end = out;
    if (!out) {
        return NULL;
    }
    *end++ = '"';
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        if (*c == '"' || *c == '\\') {
            *end++ = '\\';
            *end++ = (char)*c;
        } else if (*c < 0x20) {
            end += sprintf(end, "\\u%04x", *c);
        } else {
            *end++ = (char)*c;
        }
    }
    *end++ = '"';
    *end = '\0';
    return out;
}

int main(int argc, char **argv) {
    const char *question = argc > 1 ? argv[1] : "What is the capital of France?";
    int max_tokens = argc > 2 ? atoi(argv[2]) : 64;

    /* ANCHOR: new */
    PagodaEngine *engine = NULL;
    check(pagoda_engine_new(NULL, &engine), "pagoda_engine_new");
    /* ANCHOR_END: new */

    char *content = json_string(question);
    if (!content) {
        fprintf(stderr, "chat: out of memory\n");
        return 1;
    }
    size_t messages_len = strlen(content) + 64;
    char *messages = malloc(messages_len);
    if (!messages) {
        fprintf(stderr, "chat: out of memory\n");
        return 1;
    }
    snprintf(messages, messages_len, "[{\"role\": \"user\", \"content\": %s}]", content);
    char params[96];
    snprintf(params, sizeof params, "{\"temperature\": 0, \"max_tokens\": %d}", max_tokens);

    /* ANCHOR: run */
    uint64_t request_id = 0;
    check(pagoda_engine_add_chat(engine, messages, params, &request_id), "pagoda_engine_add_chat");
    free(messages);
    free(content);

    bool unfinished = true;
    while (unfinished) {
        check(pagoda_engine_step(engine, print_output, NULL), "pagoda_engine_step");
        check(pagoda_engine_has_unfinished(engine, &unfinished), "pagoda_engine_has_unfinished");
    }
    putchar('\n');
    check(pagoda_engine_free(engine), "pagoda_engine_free");
    /* ANCHOR_END: run */
    return 0;
}
