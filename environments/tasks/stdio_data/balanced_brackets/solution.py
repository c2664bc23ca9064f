pairs = {")": "(", "]": "[", "}": "{"}
stack = []
ok = True
for ch in input().strip():
    if ch in "([{":
        stack.append(ch)
    elif not stack or stack.pop() != pairs[ch]:
        ok = False
        break
print("YES" if ok and not stack else "NO")
