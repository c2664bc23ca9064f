def count_vowels(text):
    counts = {v: 0 for v in "aeiou"}
    for ch in text.lower():
        if ch in counts:
            counts[ch] += 1
    return counts
