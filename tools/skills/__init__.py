"""The skills family: `SKILL.md` instructions found in the skill directories (reference §2f, §8)."""
