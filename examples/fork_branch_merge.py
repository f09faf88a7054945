"""Branch and merge (tree-of-thought style): fork the state, let each branch propose an idea in
parallel (the shared prefix is prefilled once), then merge and let the model pick.

  python examples/fork_branch_merge.py [--url http://127.0.0.1:30000]
"""

from _backend import setup

from frontend_dsl import function, gen, select


@function
def plan(s, goal, num_branches=3):
    s += f"Goal: {goal}\nWe brainstorm different first steps.\n"
    branches = s.fork(num_branches)
    for i, b in enumerate(branches):
        b += f"Idea {i + 1}:"
        b += gen("idea", max_tokens=16, temperature=0.8, seed=i, stop="\n")
    branches.join()  # s["idea"] is now the list of the branches' ideas
    for i, idea in enumerate(s["idea"]):
        s += f"Idea {i + 1}:{idea}\n"
    s += "The most practical idea is Idea"
    s += select("best", choices=[f" {i + 1}" for i in range(num_branches)])


if __name__ == "__main__":
    setup(__doc__)
    state = plan.run(goal="Learn to play the guitar in three months.")
    print(state.text())
    print("best:", state["best"].strip(), "| cache hit rate:", f"{state.meta['cache_hit_rate']:.0%}")
