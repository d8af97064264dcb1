/*
 * threads.c: the header's thread model. Four threads share one engine, each adding its
 * own requests and stepping until every request is done (an output may arrive on any
 * stepping thread, yet in step order); each request must end with exactly the tokens it
 * gets when it runs alone. Runs on the simulated executor, under AddressSanitizer in scripts/test-capi.sh.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pagoda.h"

enum { THREADS = 4, PER_THREAD = 6, REQUESTS = THREADS * PER_THREAD, MAX_TOKENS = 20 };

static const char *PARAMS = "{\"temperature\": 0, \"max_tokens\": 20, \"ignore_eos\": true}";

/* Tokens and finish reasons by request id, filled by every callback. */
typedef struct {
    pthread_mutex_t lock;
    uint32_t tokens[REQUESTS][MAX_TOKENS];
    size_t counts[REQUESTS];
    int finished[REQUESTS];
    int prompt_of[REQUESTS];
    int num_finished;
    int errors;
} Results;

typedef struct {
    PagodaEngine *engine;
    Results *results;
    int first_prompt;
} Worker;

static void collect(void *user_data, const PagodaOutput *output) {
    Results *results = user_data;
    pthread_mutex_lock(&results->lock);
    uint64_t id = output->request_id;
    if (id >= REQUESTS || results->counts[id] + output->num_token_ids > MAX_TOKENS) {
        results->errors++;
    } else {
        memcpy(&results->tokens[id][results->counts[id]], output->token_ids, output->num_token_ids * sizeof(uint32_t));
        results->counts[id] += output->num_token_ids;
        if (output->finish_reason != PAGODA_FINISH_REASON_NONE) {
            results->finished[id] = (int)output->finish_reason;
            results->num_finished++;
        }
    }
    pthread_mutex_unlock(&results->lock);
}

static void prompt_text(int index, char *out, size_t size) {
    snprintf(out, size, "Request number %d asks about topic %d.", index, index * 7 % 5);
}

static int num_finished(Results *results) {
    pthread_mutex_lock(&results->lock);
    int n = results->num_finished;
    pthread_mutex_unlock(&results->lock);
    return n;
}

static void *work(void *arg) {
    Worker *worker = arg;
    char prompt[96];
    for (int i = 0; i < PER_THREAD; i++) {
        prompt_text(worker->first_prompt + i, prompt, sizeof prompt);
        uint64_t id = 0;
        if (pagoda_engine_add_text(worker->engine, prompt, PARAMS, &id) != PAGODA_STATUS_OK || id >= REQUESTS) {
            fprintf(stderr, "FAIL add_text: %s\n", pagoda_last_error());
            return (void *)1;
        }
        pthread_mutex_lock(&worker->results->lock);
        worker->results->prompt_of[id] = worker->first_prompt + i;
        pthread_mutex_unlock(&worker->results->lock);
    }
    for (int steps = 0; num_finished(worker->results) < REQUESTS; steps++) {
        if (steps == 100000 || pagoda_engine_step(worker->engine, collect, worker->results) != PAGODA_STATUS_OK) {
            fprintf(stderr, "FAIL step: %s\n", pagoda_last_error());
            return (void *)1;
        }
    }
    return NULL;
}

static PagodaEngine *new_engine(void) {
    PagodaEngine *engine = NULL;
    if (pagoda_engine_new("{\"executor\": \"sim\", \"max_num_seqs\": 8}", &engine) != PAGODA_STATUS_OK) {
        fprintf(stderr, "FAIL new: %s\n", pagoda_last_error());
        exit(1);
    }
    return engine;
}

/* Runs every prompt alone, one after another on one engine: prompt i gets id i. */
static void run_each_alone(Results *alone) {
    PagodaEngine *engine = new_engine();
    char prompt[96];
    for (int index = 0; index < REQUESTS; index++) {
        prompt_text(index, prompt, sizeof prompt);
        uint64_t id = REQUESTS;
        bool unfinished = true;
        if (pagoda_engine_add_text(engine, prompt, PARAMS, &id) != PAGODA_STATUS_OK || id != (uint64_t)index) {
            fprintf(stderr, "FAIL reference add_text: %s\n", pagoda_last_error());
            exit(1);
        }
        while (unfinished) {
            if (pagoda_engine_step(engine, collect, alone) != PAGODA_STATUS_OK ||
                pagoda_engine_has_unfinished(engine, &unfinished) != PAGODA_STATUS_OK) {
                fprintf(stderr, "FAIL reference step: %s\n", pagoda_last_error());
                exit(1);
            }
        }
    }
    pagoda_engine_free(engine);
}

int main(void) {
    static Results shared, alone;
    pthread_mutex_init(&shared.lock, NULL);
    pthread_mutex_init(&alone.lock, NULL);
    run_each_alone(&alone);

    PagodaEngine *engine = new_engine();
    pthread_t threads[THREADS];
    Worker workers[THREADS];
    for (int t = 0; t < THREADS; t++) {
        workers[t] = (Worker){.engine = engine, .results = &shared, .first_prompt = t * PER_THREAD};
        pthread_create(&threads[t], NULL, work, &workers[t]);
    }
    int failures = 0;
    for (int t = 0; t < THREADS; t++) {
        void *status = NULL;
        pthread_join(threads[t], &status);
        failures += status != NULL;
    }
    if (pagoda_engine_free(engine) != PAGODA_STATUS_OK) {
        failures++;
    }

    failures += shared.errors;
    for (uint64_t id = 0; id < REQUESTS; id++) {
        int index = shared.prompt_of[id];
        bool same = shared.counts[id] == MAX_TOKENS && alone.counts[index] == MAX_TOKENS &&
                    shared.finished[id] == PAGODA_FINISH_REASON_LENGTH &&
                    memcmp(shared.tokens[id], alone.tokens[index], sizeof shared.tokens[id]) == 0;
        if (!same) {
            fprintf(stderr, "FAIL request %llu (prompt %d): %zu tokens, finish %d; alone %zu tokens\n",
                    (unsigned long long)id, index, shared.counts[id], shared.finished[id], alone.counts[index]);
            failures++;
        }
    }
    printf("threads: %d requests on %d threads, %d failures\n", REQUESTS, THREADS, failures);
    pthread_mutex_destroy(&shared.lock);
    pthread_mutex_destroy(&alone.lock);
    return failures != 0;
}
