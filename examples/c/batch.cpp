// batch.cpp: pagoda from C++ — an RAII engine, several prompts batched together, each
// completion gathered from the streamed outputs.
//
//   batch [PROMPT]...
//
// scripts/test-capi.sh builds and runs it.
#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "pagoda.h"

namespace {

// Throws with pagoda's message when a call fails.
void check(PagodaStatus status, const char *call) {
    if (status != PAGODA_STATUS_OK) {
        throw std::runtime_error(std::string(call) + ": " + pagoda_last_error());
    }
}

// One completion as it grows.
struct Completion {
    std::string text;
    std::vector<uint32_t> token_ids;
    PagodaFinishReason finish_reason = PAGODA_FINISH_REASON_NONE;
};

// An engine handle that frees itself.
class Engine {
  public:
    explicit Engine(const char *options_json) {
        PagodaEngine *engine = nullptr;
        check(pagoda_engine_new(options_json, &engine), "pagoda_engine_new");
        engine_.reset(engine);
    }

    uint64_t add_text(const std::string &prompt, const char *params_json) {
        uint64_t id = 0;
        check(pagoda_engine_add_text(engine_.get(), prompt.c_str(), params_json, &id), "pagoda_engine_add_text");
        completions_[id];
        return id;
    }

    // Steps until every request has finished.
    void run() {
        bool unfinished = true;
        while (unfinished) {
            check(pagoda_engine_step(engine_.get(), &Engine::collect, this), "pagoda_engine_step");
            check(pagoda_engine_has_unfinished(engine_.get(), &unfinished), "pagoda_engine_has_unfinished");
        }
    }

    const Completion &completion(uint64_t id) const { return completions_.at(id); }

  private:
    static void collect(void *self, const PagodaOutput *output) {
        Completion &completion = static_cast<Engine *>(self)->completions_[output->request_id];
        completion.text.append(output->text, output->text_len);
        completion.token_ids.insert(completion.token_ids.end(), output->token_ids,
                                    output->token_ids + output->num_token_ids);
        completion.finish_reason = output->finish_reason;
    }

    struct Free {
        void operator()(PagodaEngine *engine) const { pagoda_engine_free(engine); }
    };
    std::unique_ptr<PagodaEngine, Free> engine_;
    std::map<uint64_t, Completion> completions_;
};

const char *reason_name(PagodaFinishReason reason) {
    switch (reason) {
    case PAGODA_FINISH_REASON_STOP:
        return "stop";
    case PAGODA_FINISH_REASON_LENGTH:
        return "length";
    case PAGODA_FINISH_REASON_ABORT:
        return "abort";
    case PAGODA_FINISH_REASON_ERROR:
        return "error";
    default:
        return "unfinished";
    }
}

}  // namespace

int main(int argc, char **argv) {
    std::vector<std::string> prompts(argv + 1, argv + argc);
    if (prompts.empty()) {
        prompts = {"The capital of France is", "Water boils at", "The largest planet is"};
    }
    try {
        Engine engine(nullptr);
        std::vector<uint64_t> ids;
        for (const std::string &prompt : prompts) {
            ids.push_back(engine.add_text(prompt, "{\"temperature\": 0, \"max_tokens\": 12}"));
        }
        engine.run();
        for (size_t i = 0; i < ids.size(); i++) {
            const Completion &completion = engine.completion(ids[i]);
            std::printf("%s|%s [%s, %zu tokens]\n", prompts[i].c_str(), completion.text.c_str(),
                        reason_name(completion.finish_reason), completion.token_ids.size());
        }
    } catch (const std::exception &error) {
        std::fprintf(stderr, "batch: %s\n", error.what());
        return 1;
    }
    return 0;
}
