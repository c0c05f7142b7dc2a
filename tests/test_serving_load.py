import threading
import time

from llmkit.course.serving import Load, run_concurrently


def test_every_item_runs_once_with_at_most_clients_at_a_time():
    running, most, lock = [0], [0], threading.Lock()

    def work(item: int) -> int:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01)
        with lock:
            running[0] -= 1
        return item * 2

    results, seconds = run_concurrently(list(range(12)), 3, work)
    assert sorted(results) == [2 * i for i in range(12)]
    assert most[0] == 3  # the three clients overlapped, and never more than three
    assert seconds > 0


def test_pooled_runs_of_one_level_add_their_tokens_and_seconds_and_keep_every_first_token():
    rounds = [Load(8, 300, 1.0, [0.05, 0.06], [2, 3]), Load(8, 300, 2.0, [0.04, 0.30], [4])]
    pooled = Load.pooled(rounds)
    assert (pooled.clients, pooled.output_tokens, pooled.seconds) == (8, 600, 3.0)
    assert pooled.tokens_per_s == 200.0  # all the tokens over all the time, not a mean of rates
    assert sorted(pooled.first_token_s) == [0.04, 0.05, 0.06, 0.30]
    assert pooled.first_token_percentile(0.95) == 0.30 and pooled.blocks_per_request == [2, 3, 4]
