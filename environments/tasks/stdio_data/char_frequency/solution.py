from collections import Counter

counts = Counter(input().strip())
for letter in sorted(counts):
    print(letter, counts[letter])
