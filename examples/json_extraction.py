"""JSON extraction with a schema: the output is valid JSON for the schema by construction.

  python examples/json_extraction.py [--url http://127.0.0.1:30000]
"""

import json

from _backend import setup

from frontend_dsl import assistant, function, gen, system, user

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 30},
        "age": {"type": "integer", "minimum": 0, "maximum": 130},
        "city": {"type": "string", "maxLength": 30},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}


@function
def extract_person(s, text):
    s += system("Extract the person described in the text as JSON.")
    s += user(text)
    s += assistant(gen("person", max_tokens=48, temperature=0, json_schema=PERSON))


if __name__ == "__main__":
    setup(__doc__)
    for text in ["Maria Lopez, 34, moved to Lisbon last spring.",
                 "Our new neighbour Tom is 71 and lives in Leeds."]:
        state = extract_person.run(text=text)
        person = json.loads(state["person"])
        print(text, "->", person)
