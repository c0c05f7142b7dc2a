"""Which tool-line format lets a small transformer choose a tool it has never seen?

A toy version of the chat model's hardest skill, in ids instead of words: 1-5 tool lines, each a
name (a verb V, then the two subject words S1 S2) and a description holding the subject among
filler words; a user message holding one tool's subject among filler; the call to write. Held-out
verbs and subjects never name a tool in training (they do appear there as the user's other words).
The model first learns to copy (random spans said twice, variable lengths: an induction circuit),
then trains on tool rows (3 batches in 4) and copy rows (1 in 4), loss on the assistant part only.

Formats (one tool line, then what the assistant writes; d = a filler word):
  A   V _ S1 _ S2 : d S1 S2 d           call: V _ S1 _ S2                 (the course's line: name first)
  AT  the same lines                    thinking: S1 S2, then the call    (the recipe's skill data)
  DT  d S1 S2 d : V _ S1 _ S2           thinking: S1 S2, then the call    (name last)
  DC  d S1 S2 d d : V _ S1 _ S2         thinking: the line from S1 on through the name, then the call
  DR  d S1 S2 e e : V _ S1 _ S2         as DC, but the description ends in one of 3 common endings
  KT  d d S1 S2 : V _ S1 _ S2           thinking: S1 S2 : V, then the call
Scores per split (greedy from the end of the prompt): verb (the call's, or for DC/DR/KT the
thinking's, first name token), subj (the thinking's subject), verb|subj (the verb with the
thinking given: teacher-forced), call (the call's verb after a generated thinking, DC/DR/KT).
chance = picking one of the offered tools at random.

    python data/experiments/tool_lookup/probe.py FORMAT STEPS LAYERS [SEED] [COPY_STEPS]
    python data/experiments/tool_lookup/probe.py AT 1500 2 0 750      # about 9 min on one core
"""
import random, sys, time
import torch
from llmkit.model import ModelConfig, Transformer

PAD, TOOLS, NL, USER, CALL, Q, US, COLON, THINK, ENDT = range(10)
WORDS = list(range(16, 816))
r0 = random.Random(123); r0.shuffle(WORDS)
TRAIN_VERBS, TRAIN_SUBJ, INVENTED = WORDS[:9], WORDS[9:69], WORDS[69:369]
HELD_VERBS, HELD_SUBJ, FILLER = WORDS[369:375], WORDS[375:405], WORDS[410:]
ENDINGS = [[WORDS[405], WORDS[406]], [WORDS[407], WORDS[406]], [WORDS[408], WORDS[409]]]

def tool_line(fmt, v, s, rng):
    d1, d2 = rng.choice(FILLER), rng.choice(FILLER)
    if fmt.startswith("A"):
        return [v, US, s[0], US, s[1], COLON, d1, s[0], s[1], d2, NL]
    if fmt == "DC":  # description with the subject inside, then the name
        return [d1, s[0], s[1], d2, rng.choice(FILLER), COLON, v, US, s[0], US, s[1], NL]
    if fmt == "DR":  # the same, but the description ends in one of 3 common endings (as templated ones do)
        return [d1, s[0], s[1]] + rng.choice(ENDINGS) + [COLON, v, US, s[0], US, s[1], NL]
    if fmt.startswith("K"):  # the subject right before the name
        return [d1, d2, s[0], s[1], COLON, v, US, s[0], US, s[1], NL]
    return [d1, s[0], s[1], d2, COLON, v, US, s[0], US, s[1], NL]

def example(fmt, split, rng):
    n = rng.randint(1, 5)
    if split == "train":
        pick = lambda pool: rng.choice(INVENTED) if rng.random() < 0.35 else rng.choice(pool)
        verbs = [pick(TRAIN_VERBS) for _ in range(n)]
        pool_s = lambda: pick(TRAIN_SUBJ)
    else:
        verbs = [rng.choice(HELD_VERBS) for _ in range(n)]
        pool_s = lambda: rng.choice(HELD_SUBJ)
    subjs = []
    while len(subjs) < n:
        s = (pool_s(), pool_s())
        if s[0] != s[1] and all(s[0] not in t and s[1] not in t for t in subjs):
            subjs.append(s)
    k = rng.randrange(n)
    ids = [TOOLS]
    lines = []
    for v, s in zip(verbs, subjs):
        lines.append(tool_line(fmt, v, s, rng))
        ids += lines[-1]
    user = [rng.choice(FILLER) for _ in range(rng.randint(3, 6))]
    if split == "train":
        for _ in range(2):
            user.insert(rng.randint(0, len(user)), rng.choice(HELD_VERBS + HELD_SUBJ))
    at = rng.randint(0, len(user))
    user[at:at] = list(subjs[k])
    ids += [USER] + user + [CALL]
    start = len(ids)
    marks = {}
    if fmt == "DT" or fmt == "AT":
        marks["subj"] = len(ids) + 1
        ids += [THINK, subjs[k][0], subjs[k][1], ENDT]
    if fmt in ("DC", "DR"):  # thinking: the subject, then the rest of that line up to and including the name
        line = next(row for row in lines if row[1:3] == list(subjs[k]))
        marks["subj"] = len(ids) + 1
        ids += [THINK] + line[1:-1]
        marks["verb"] = len(ids) - 5
        ids += [ENDT, Q]
        marks["call"] = len(ids)
        ids += [verbs[k], US, subjs[k][0], US, subjs[k][1], NL]
        return ids, start, marks, n
    if fmt == "KT":  # thinking: the subject, then the line's name after it (pure induction), the call copies it
        marks["subj"] = len(ids) + 1
        ids += [THINK, subjs[k][0], subjs[k][1], COLON]
        marks["verb"] = len(ids)
        ids += [verbs[k], ENDT, Q]
        marks["call"] = len(ids)
        ids += [verbs[k], US, subjs[k][0], US, subjs[k][1], NL]
        return ids, start, marks, n
    ids += [Q]
    marks["verb"] = len(ids)
    ids += [verbs[k], US, subjs[k][0], US, subjs[k][1], NL]
    return ids, start, marks, n

def batch(fmt, split, rng, size):
    rows = [example(fmt, split, rng) for _ in range(size)]
    width = max(len(r[0]) for r in rows)
    x = torch.full((size, width), PAD); y = torch.full((size, width), -100)
    for i, (ids, start, _, _) in enumerate(rows):
        x[i, :len(ids)] = torch.tensor(ids)
        for p in range(start, len(ids)):
            y[i, p - 1] = ids[p]
    return x, y, rows

def copy_batch(rng, size=32, width=96):
    """Spans of 4-40 random words said twice, back to back, until the row is full (variable lengths,
    so only content-based copying, not a fixed offset, predicts the second saying)."""
    x = torch.zeros(size, width, dtype=torch.long); y = torch.full_like(x, -100)
    for i in range(size):
        row, counted = [], []
        while len(row) < width + 1:
            part = [rng.choice(WORDS) for _ in range(rng.randint(4, 40))]
            row += part + part
            counted += [False] * (len(part) + 1) + [True] * (len(part) - 1)
        x[i] = torch.tensor(row[:width])
        for p in range(width):
            if counted[p + 1]:
                y[i, p] = row[p + 1]
    return x, y

def main(argv):
    global FMT
    torch.set_num_threads(1)
    FMT, STEPS, LAYERS = argv[0], int(argv[1]), int(argv[2])
    SEED = int(argv[3]) if len(argv) > 3 else 0
    COPY_STEPS = int(argv[4]) if len(argv) > 4 else 1000
    torch.manual_seed(SEED)
    model = Transformer(ModelConfig.llama(vocab_size=816, context_length=128, d_model=128, n_layers=LAYERS, n_heads=4))
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.1)
    rng = random.Random(SEED)

    @torch.no_grad()
    def evaluate(model, split, n=300):
        rows = [example(FMT, split, random.Random(1000 + i)) for i in range(n)]
        got = {"verb": 0, "subj": 0, "verb|subj": 0, "call": 0}
        for ids, start, marks, _ in rows:
            seq = torch.tensor([ids[:start]])
            for _ in range(marks.get("call", marks["verb"]) - start + 1):
                seq = torch.cat([seq, model(seq)[:, -1].argmax(-1, keepdim=True)], 1)
            got["verb"] += int(seq[0, marks["verb"]]) == ids[marks["verb"]]
            if "call" in marks:
                got["call"] += int(seq[0, marks["call"]]) == ids[marks["call"]]
            if "subj" in marks:
                got["subj"] += seq[0, marks["subj"]:marks["subj"] + 2].tolist() == ids[marks["subj"]:marks["subj"] + 2]
            tf = model(torch.tensor([ids[:marks["verb"]]]))[0, -1].argmax()
            got["verb|subj"] += int(tf) == ids[marks["verb"]]
        chance = sum(1 / r[3] for r in rows) / n
        return " ".join(f"{k} {v / n:.2f}" for k, v in got.items()) + f" (chance {chance:.2f})"

    t0 = time.time()
    for step in range(1, COPY_STEPS + 1):
        x, y = copy_batch(rng)
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(); loss.backward(); opt.step()
        if step % 250 == 0:
            with torch.no_grad():
                x, y = copy_batch(random.Random(7), 64); m = y != -100
                print("copy", step, f"{(model(x).argmax(-1)[m] == y[m]).float().mean():.2f}", f"{time.time() - t0:.0f}s", flush=True)
    for g in opt.param_groups:
        g["lr"] = 1e-3
    for step in range(1, STEPS + 1):
        x, y = copy_batch(rng) if step % 4 == 0 else batch(FMT, "train", rng, 32)[:2]
        loss = torch.nn.functional.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(); loss.backward(); opt.step()
        if step % 500 == 0:
            model.eval()
            print(f"{FMT} L{LAYERS} {step} loss {loss.item():.3f} | seen {evaluate(model, 'train')} | unseen {evaluate(model, 'heldout')} | {time.time() - t0:.0f}s", flush=True)
            model.train()


if __name__ == "__main__":
    main(sys.argv[1:])
