"""The chat tasks on which prompt lookup's acceptance is measured (tiles_ext.bench.acceptance).

Prompt lookup drafts the tokens that followed the last n-gram's earlier occurrence in the prompt, so how often a
draft is accepted depends on how much of the answer the prompt already holds: a rewrite of a given passage and an
edit of a given function copy most of their input, a free-form answer copies little. The three tasks span that.
"""
from __future__ import annotations

from dataclasses import dataclass

PASSAGE = (
    "The city council approved the new library plan on Tuesday after a long debate. The architects designed a "
    "building with three floors, a reading garden on the roof and a hall for public lectures. Volunteers will move "
    "the old collection into the new building over the summer, and the staff will sort the rare books by hand. The "
    "council expects the library to open in the autumn of next year. Local schools will bring their students for "
    "weekly visits, and the library will lend laptops to families who do not own one. Critics argued that the city "
    "should repair the roads first, but the mayor said that a good library helps every neighbourhood. The builders "
    "will start work in March, and they will finish the outer walls before the winter. A local bakery donated the "
    "money for the children's corner, and an artist painted a large map of the river on the wall of the entrance. "
    "The librarians will run reading clubs for adults in the evenings, and they will teach older residents how to "
    "use the computers. Everyone hopes that the new library will bring the community together."
)

FUNCTION = '''def summarize(x, limit, skip_empty):
    total = 0
    count = 0
    longest = None
    shortest = None
    words = {}
    for line in x:
        line = line.strip()
        if skip_empty and not line:
            continue
        count += 1
        total += len(line)
        if longest is None or len(line) > len(longest):
            longest = line
        if shortest is None or len(line) < len(shortest):
            shortest = line
        for word in line.split():
            word = word.lower()
            words[word] = words.get(word, 0) + 1
    common = sorted(words.items(), key=lambda kv: -kv[1])[:limit]
    mean = total / count if count else 0.0
    return {
        "lines": count,
        "mean_length": mean,
        "longest": longest,
        "shortest": shortest,
        "common_words": common,
    }
'''


@dataclass(frozen=True)
class Task:
    name: str
    description: str
    message: str   # the user turn; the model's chat template wraps it


TASKS = (
    Task("rewrite", "copy-heavy: rewrite a given 200-word passage (grammar and passive voice)",
         "Rewrite the following paragraph in the passive voice. Keep every sentence and fix any grammar "
         "mistakes.\n\n" + PASSAGE),
    Task("code-edit", "copy-heavy: edit a given 30-line Python function (rename a variable, add type hints)",
         "Add type hints to this Python function and rename the variable x to lines. Reply with the complete "
         "edited function only, every line of it.\n\n```python\n" + FUNCTION + "```"),
    Task("chat", "free-form: answer a question with nothing to copy from the prompt",
         "Why do leaves change colour in autumn? Explain it to a ten-year-old in a few paragraphs."),
)


def task(name: str) -> Task:
    for t in TASKS:
        if t.name == name:
            return t
    raise ValueError(f"unknown task {name!r}; known: {', '.join(t.name for t in TASKS)}")
