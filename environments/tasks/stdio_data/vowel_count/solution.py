print(sum(1 for ch in input() if ch.lower() in "aeiou"))
