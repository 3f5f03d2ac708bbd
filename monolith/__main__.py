from monolith.cli import main

main()
