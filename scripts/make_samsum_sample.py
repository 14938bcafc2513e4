"""Write training/assets/samsum_sample.jsonl: samsum-shaped dialog/summary pairs, generated here.

The dialogs come from templates (plans, favours, delays, gifts, ...) filled with names, places,
times and objects drawn from a seeded random generator, so the output is byte-identical on every
run. Each summary is a function of the facts in its dialog, which is what lets a tiny model's
loss fall visibly within a few hundred steps, while the varied fillers keep the text varied.

Rows look like samsum's: {"id": "13800001", "dialogue": "Anna: ...\\r\\nTom: ...", "summary": "..."}.
Most dialogs separate their lines with "\\r\\n", some with "\\n", as samsum does.

    python scripts/make_samsum_sample.py            # rewrite the committed file
    python scripts/make_samsum_sample.py --check    # exit 1 if the committed file is stale
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Callable
from pathlib import Path

SEED = 20240607
NUM_DIALOGS = 2400
OUT = Path(__file__).resolve().parent.parent / "training" / "assets" / "samsum_sample.jsonl"

NAMES = [
    "Amanda", "Jerry", "Tom", "Anna", "Lucas", "Mia", "Oliver", "Sophie", "Ethan", "Chloe",
    "Noah", "Emma", "Liam", "Olivia", "Jacob", "Ava", "Mason", "Isabella", "Logan", "Grace",
    "Daniel", "Lily", "Henry", "Zoe", "Samuel", "Hannah", "David", "Ella", "Jack", "Ruby",
    "Max", "Julia", "Adam", "Kate", "Peter", "Laura", "Martin", "Eva", "Victor", "Nina",
    "Oscar", "Alice", "Hugo", "Clara", "Leo", "Maya", "Felix", "Rosa", "Ian", "Tessa",
    "Kevin", "Paula", "Ryan", "Wendy", "Simon", "Helen", "Frank", "Diana", "Greg", "Irene",
    "Marcus", "Beatrice", "Tobias", "Yasmin", "Rafael", "Ingrid", "Dominic", "Priya", "Mateo",
    "Agnieszka", "Kenji", "Fatima", "Gustav", "Leila", "Callum", "Freya", "Arjun", "Siobhan",
    "Bruno", "Camille", "Desmond", "Elif", "Fernando", "Gemma", "Hamish", "Ines", "Jonas",
    "Keiko", "Lorenzo", "Magnus", "Nadia", "Orla", "Pablo", "Quentin", "Rebecca", "Stefan",
    "Tamsin", "Ulrich", "Valentina", "Wojtek", "Xavier", "Yusuf", "Zara", "Bartek", "Carmen",
]  # fmt: skip
PLACES = [
    "the cinema", "the park", "the station", "the library", "Luigi's", "the gym", "the mall",
    "the old bridge", "the bakery on Main Street", "the pub", "the museum", "the beach",
    "the office", "the coffee shop", "the bus stop", "the market", "the pool", "the stadium",
    "the botanical garden", "the bowling alley", "the town hall", "the harbour", "the zoo",
    "the climbing wall", "the farmers' market", "the ice rink", "the concert hall", "the theatre",
    "the skate park", "the vineyard", "the lighthouse", "the aquarium", "the gallery",
]  # fmt: skip
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
TIMES = [
    "7 am", "8 am", "9 am", "10 am", "11 am", "noon", "1 pm", "2 pm", "3 pm", "4 pm", "5 pm",
    "6 pm", "7 pm", "8 pm", "9 pm",
]  # fmt: skip
ITEMS = [
    "charger", "umbrella", "bike", "drill", "laptop", "camera", "tent", "ladder", "book",
    "car", "guitar", "suitcase", "projector", "blender", "hair dryer", "tripod",
]  # fmt: skip
ACTIVITIES = [
    "play tennis", "go jogging", "watch a film", "have dinner", "go bowling", "study",
    "go shopping", "have a coffee", "play board games", "go swimming", "see an exhibition",
    "go climbing",
]  # fmt: skip
GIFTS = [
    "a scarf", "a book", "flowers", "a board game", "headphones", "a plant", "a mug",
    "concert tickets", "a watch", "chocolates", "a wallet", "a photo album",
]  # fmt: skip
DISHES = ["pizza", "sushi", "pasta", "tacos", "curry", "burgers", "salad", "soup", "noodles"]
PETS = ["dog", "cat", "parrot", "hamster", "rabbit", "fish"]
SUBJECTS = ["maths", "chemistry", "history", "physics", "French", "biology", "statistics"]
REASONS = [
    "the traffic is terrible", "my train is delayed", "I overslept", "my meeting ran late",
    "I missed the bus", "I had to pick up my sister", "my car wouldn't start",
]  # fmt: skip
CITIES = [
    "Paris", "Rome", "Berlin", "Lisbon", "Prague", "Vienna", "Madrid", "Oslo", "Dublin",
    "Amsterdam", "Copenhagen", "Budapest", "Krakow", "Edinburgh", "Barcelona", "Athens",
    "Stockholm", "Helsinki", "Tallinn", "Reykjavik", "Marseille", "Naples", "Seville", "Porto",
]  # fmt: skip
OPENERS = ["Hi", "Hey", "Hello", "Hiya", "Morning", "Hey there"]
YES = ["Sure!", "OK", "Sounds good", "Great", "Perfect", "Deal", "Sure :)", "Fine by me"]
SMALL_TALK = [
    "Btw the weather is gorgeous today", "I'm exhausted after this week",
    "Have you seen the new series everyone is talking about?", "My neighbour is renovating again",
    "I finally finished that novel, the ending was surprising", "The printer jammed twice today",
    "My sister just adopted a kitten", "Work has been chaotic lately",
    "I started learning the piano, wish me luck", "The heating in our flat is broken again",
    "I'm trying to drink less coffee", "Our landlord wants to raise the rent",
    "Guess who I bumped into yesterday", "I've been cycling to work every morning",
    "The queue at the post office was endless", "I burnt the pancakes this morning",
    "My phone battery dies so quickly now", "We're repainting the kitchen yellow",
    "The festival tickets are sold out already", "I can't believe it's almost December",
    "My grandmother turned ninety last weekend", "The concert was absolutely brilliant",
    "Someone scratched my car in the parking lot", "I'm volunteering at the animal shelter",
    "The museum has a new dinosaur exhibition", "Our football team lost again, typical",
    "I need a holiday so badly", "The strawberries in the garden are finally ripe",
    "I signed up for a pottery workshop", "There was a thunderstorm all night",
]  # fmt: skip
BYES = ["See you!", "Bye!", "Thanks!", "Cool, thanks", "See ya", "Talk later", ":)", "<3"]

Line = tuple[str, str]
Scenario = Callable[[random.Random, str, str], tuple[list[Line], str]]


def _plan(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    act, place, day, time = r.choice(ACTIVITIES), r.choice(PLACES), r.choice(DAYS), r.choice(TIMES)
    lines = [
        (a, f"{r.choice(OPENERS)}! Do you want to {act} on {day}?"),
        (b, f"{r.choice(YES)} Where?"),
        (a, f"At {place}, maybe at {time}?"),
        (b, r.choice(YES)),
    ]
    return lines, f"{a} and {b} will {act} at {place} on {day} at {time}."


def _late(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    mins, reason, place = r.choice([5, 10, 15, 20, 30, 40]), r.choice(REASONS), r.choice(PLACES)
    lines = [
        (a, f"I'll be {mins} minutes late, {reason}."),
        (b, f"No problem, I'm waiting at {place}."),
        (a, "Sorry!"),
    ]
    why = reason.replace("I ", f"{a} ").replace("my ", "their ").replace("I'", f"{a}'")
    return lines, f"{a} will be {mins} minutes late because {why}. {b} is waiting at {place}."


def _borrow(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    item, day = r.choice(ITEMS), r.choice(DAYS)
    lines = [
        (a, f"{r.choice(OPENERS)} {b}, can I borrow your {item}?"),
        (b, "What for?"),
        (a, f"Mine is broken and I need one until {day}."),
        (b, f"{r.choice(YES)} Come and get it tonight."),
        (a, r.choice(BYES)),
    ]
    return lines, f"{b} will lend {a} the {item} until {day}. {a} will pick it up tonight."


def _gift(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    friend, gift, price = r.choice(NAMES), r.choice(GIFTS), r.choice([10, 15, 20, 25, 30, 40, 50])
    lines = [
        (a, f"It's {friend}'s birthday soon. Any idea for a present?"),
        (b, f"What about {gift}?"),
        (a, f"Good idea! Let's split it, {price} euros each?"),
        (b, r.choice(YES)),
    ]
    return lines, f"{a} and {b} will buy {gift} for {friend}'s birthday and pay {price} euros each."


def _dinner(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    dish, time = r.choice(DISHES), r.choice(TIMES[8:])
    lines = [
        (a, "What should we have for dinner?"),
        (b, f"I'm craving {dish}."),
        (a, f"{r.choice(YES)} I'll order it for {time}."),
        (b, "Thanks, I'll be home by then."),
    ]
    return lines, f"{a} will order {dish} for dinner at {time}."


def _sick(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    day, colleague = r.choice(DAYS[:5]), r.choice(NAMES)
    lines = [
        (a, f"I'm sick and won't come to work on {day}."),
        (b, "Oh no, get well soon!"),
        (a, f"Could you tell {colleague} to take over my meeting?"),
        (b, f"{r.choice(YES)} I'll tell {colleague}."),
    ]
    return (
        lines,
        f"{a} is sick and won't work on {day}. {b} will ask {colleague} to take over the meeting.",
    )


def _pet(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    pet, days, city = r.choice(PETS), r.choice([2, 3, 4, 5, 7, 10]), r.choice(CITIES)
    lines = [
        (a, f"I'm going to {city} for {days} days. Could you look after my {pet}?"),
        (b, f"Of course, I love your {pet}!"),
        (a, "Thank you so much, I'll leave the keys with you."),
    ]
    return lines, f"{b} will look after {a}'s {pet} for {days} days while {a} is in {city}."


def _homework(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    subj, day, place = r.choice(SUBJECTS), r.choice(DAYS), r.choice(PLACES)
    lines = [
        (a, f"Did you finish the {subj} homework?"),
        (b, "Not yet, it's really hard."),
        (a, f"Let's do it together on {day} at {place}."),
        (b, r.choice(YES)),
    ]
    return lines, f"{a} and {b} will do the {subj} homework together on {day} at {place}."


def _lost(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    item, place = r.choice([*ITEMS, "keys", "phone", "wallet", "glasses"]), r.choice(PLACES)
    found = r.random() < 0.5
    lines = [
        (a, f"Have you seen my {item}?"),
        (b, f"I think you left it at {place}."),
    ]
    if found:
        lines.append((a, "Found it there, thanks!"))
        return lines, f"{a} lost the {item} and found it at {place} thanks to {b}."
    lines.append((a, "It's not there, I'll keep looking."))
    return lines, f"{a} lost the {item}. It was not at {place}, where {b} thought it was."


def _trip(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    city, month, nights = (
        r.choice(CITIES),
        r.choice(["May", "June", "July", "August"]),
        r.choice([2, 3, 4, 5]),
    )
    lines = [
        (a, f"Shall we go to {city} in {month}?"),
        (b, "Yes! For how long?"),
        (a, f"{nights} nights. I'll book the hotel."),
        (b, "I'll look for flights then."),
    ]
    return (
        lines,
        f"{a} and {b} will spend {nights} nights in {city} in {month}. {a} books the hotel and {b} looks for flights.",
    )


def _match(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    team1, team2 = r.sample(["Reds", "Blues", "Lions", "Eagles", "Tigers", "Sharks"], 2)
    s1, s2 = r.randint(0, 4), r.randint(0, 4)
    lines = [
        (a, "Did you watch the game yesterday?"),
        (b, f"Yes, {team1} {s1} - {s2} {team2}!"),
        (a, "What a match."),
    ]
    if s1 == s2:
        result = f"{team1} and {team2} drew {s1} - {s2}"
    elif s1 > s2:
        result = f"{team1} beat {team2} {s1} - {s2}"
    else:
        result = f"{team2} beat {team1} {s2} - {s1}"
    return lines, f"{a} and {b} watched the game yesterday: {result}."


def _shopping(r: random.Random, a: str, b: str) -> tuple[list[Line], str]:
    things = r.sample(
        ["milk", "bread", "eggs", "apples", "rice", "cheese", "coffee", "tomatoes"], 3
    )
    lines = [
        (a, "I'm at the shop, do we need anything?"),
        (b, f"{things[0].capitalize()}, {things[1]} and {things[2]}, please."),
        (a, r.choice(YES)),
    ]
    return (
        lines,
        f"{a} is at the shop and will buy {things[0]}, {things[1]} and {things[2]} for {b}.",
    )


SCENARIOS: list[Scenario] = [
    _plan, _late, _borrow, _gift, _dinner, _sick, _pet, _homework, _lost, _trip, _match, _shopping,
]  # fmt: skip


def make_rows(num: int = NUM_DIALOGS, seed: int = SEED) -> list[dict[str, str]]:
    """The sample's rows, a pure function of (num, seed)."""
    r = random.Random(seed)
    rows = []
    for i in range(num):
        a, b = r.sample(NAMES, 2)
        lines, summary = r.choice(SCENARIOS)(r, a, b)
        if r.random() < 0.35:  # small talk before getting to the point
            lines.insert(
                0, (a, f"{r.choice(SMALL_TALK)}{r.choice(['', '!', '...', ' :D', ' haha'])}")
            )
            lines.insert(
                1, (b, r.choice(["Haha", "Really?", "Oh no", "Nice!", "Same here", "Wow"]))
            )
        if r.random() < 0.3:  # a closing pleasantry, as real chats have
            lines.append((b if lines[-1][0] == a else a, r.choice(BYES)))
        sep = "\r\n" if r.random() < 0.8 else "\n"
        dialogue = sep.join(f"{who}: {text}" for who, text in lines)
        rows.append({"id": str(13800001 + i), "dialogue": dialogue, "summary": summary})
    return rows


def render(rows: list[dict[str, str]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the committed file is stale")
    args = ap.parse_args()
    text = render(make_rows())
    if args.check:
        if not OUT.exists() or OUT.read_text(encoding="utf-8") != text:
            print(f"{OUT} is stale: run python scripts/make_samsum_sample.py", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8", newline="")
    print(f"wrote {OUT} ({len(text.encode())} bytes, {NUM_DIALOGS} dialogs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
