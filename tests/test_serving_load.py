import threading
import time

from llmkit.course.serving import run_concurrently


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
