w = input().strip()
print("YES" if w == w[::-1] else "NO")
