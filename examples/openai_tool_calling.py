"""Tool calling through the official openai client: the model must call a tool
(``tool_choice="required"``), so its arguments are valid JSON for the tool's schema by
construction; we run the tool and send the result back for the final answer.

  sglang-lite serve --port 30000 &
  python examples/openai_tool_calling.py [--base-url http://127.0.0.1:30000/v1]
"""

import argparse
import json

from openai import OpenAI

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}]


def get_weather(city: str, unit: str) -> dict:
    return {"city": city, "temperature": 21 if unit == "celsius" else 70, "unit": unit, "sky": "clear"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--base-url", default="http://127.0.0.1:30000/v1")
    args = parser.parse_args()
    client = OpenAI(base_url=args.base_url, api_key="none")
    model = client.models.list().data[0].id
    messages = [{"role": "user", "content": "What is the weather in Paris right now?"}]

    first = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, tool_choice="required",
                                           parallel_tool_calls=False, temperature=0, max_tokens=80)
    call = first.choices[0].message.tool_calls[0]
    arguments = json.loads(call.function.arguments)
    print(f"model called {call.function.name}({arguments})")
    result = get_weather(**arguments)

    messages += [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                 {"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)}]
    # tool_choice="none": the answer in words now (a small model would happily call again)
    final = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, tool_choice="none",
                                           temperature=0, max_tokens=60)
    print("answer:", final.choices[0].message.content)


if __name__ == "__main__":
    main()
