"""Extract structured records into a pydantic model: the gen is constrained by the
model's JSON schema, and ``s["record"]`` is the parsed instance.

    .venv/bin/python examples/json_extraction.py
    furca run examples/json_extraction.py --backend http://127.0.0.1:30000

Needs constrained decoding (the engine's grammar backend; `furca serve` has one).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

import furca as sgl


class Contact(BaseModel):
    name: str = Field(max_length=40)
    role: Literal["engineer", "manager", "designer", "other"]
    email: str = Field(pattern=r"^[a-z.]+@[a-z]+\.[a-z]{2,3}$")
    years_at_company: int = Field(ge=0, le=50)


@sgl.function
def extract_contact(s, text):
    s += sgl.system("You extract contact records from text as JSON.")
    s += sgl.user("Extract the contact from this note:\n" + text)
    s += sgl.assistant(sgl.gen("record", json_schema=Contact, max_tokens=96, temperature=0))


NOTES = [
    "Met Dana Whitfield today, she's been an engineer here for 6 years. Reach her at dana.whitfield@acme.com.",
    "Our new design lead, Omar Haddad (omar@studio.io), joined two years ago.",
]


def main() -> None:
    for state in extract_contact.run_batch([{"text": t} for t in NOTES], progress_bar=False):
        record: Contact = state["record"]
        print(record.model_dump())


if __name__ == "__main__":
    if sgl.global_config.default_backend is not None:  # `furca run` set one
        main()
    else:
        with sgl.Engine() as engine:  # the default model, pulled on first use
            sgl.set_default_backend(engine)
            main()
