Feature: Checkpoints, live rollback and the archive
  In order to undo what an agent did, back to any step, without stopping it
  As an agent runtime
  I want to checkpoint a mounted sandbox, roll it back to any checkpoint while
  it stays mounted, and keep what each rollback left in an archive that I can
  export and restore

  Background:
    Given a base directory with these files:
      | path          | content      |
      | README.md     | hello        |
      | src/main.go   | package main |
      | docs/guide.md | the guide    |
    And a sandbox "work" over the base
    And the sandbox "work" is mounted

  Scenario: Create, list and compare checkpoints
    When I write "v1" to "notes.txt" in the mount
    And I create the checkpoint "first" of "work"
    And I write "v2" to "notes.txt" in the mount
    And I delete "docs/guide.md" in the mount
    And I write "package main // new" to "src/new.go" in the mount
    And I create the checkpoint "second" of "work"
    Then the checkpoints of "work" are "first, second", oldest first
    And the diff from "first" to "second" is:
      | change   | path          |
      | added    | src/new.go    |
      | modified | notes.txt     |
      | deleted  | docs/guide.md |
    And the diff from "second" to the live state is empty
    When I write "v3" to "notes.txt" in the mount
    Then the diff from "second" to the live state is:
      | change   | path      |
      | modified | notes.txt |
    And the base is unchanged

  Scenario: Roll a live mount back to a middle checkpoint
    When I write "v1" to "notes.txt" in the mount
    And I create the checkpoint "one" of "work"
    And I write "v2" to "notes.txt" in the mount
    And I write "two" to "two.txt" in the mount
    And I create the checkpoint "two" of "work"
    And I write "v3" to "notes.txt" in the mount
    And I delete "README.md" in the mount
    And I create the checkpoint "three" of "work"
    And a reader holds "notes.txt" open
    And I roll "work" back to the checkpoint "two"
    Then the reader's next read fails with ESTALE
    And "notes.txt" in the mount contains "v2"
    And "two.txt" in the mount contains "two"
    And "README.md" in the mount contains "hello"
    And the rollback reports "README.md, notes.txt" as changed
    And the sandbox "work" is still mounted
    And the checkpoints of "work" are "one, two, three", oldest first
    And every checkpoint of "work" verifies
    And the base is unchanged

  Scenario: Export and restore what a rollback left
    When I create the checkpoint "clean" of "work"
    And I write "agent work" to "work.txt" in the mount
    And I change the mode of "work.txt" in the mount to 664
    And I append " changed" to "README.md" in the mount
    And I roll "work" back to the checkpoint "clean"
    Then "work.txt" does not exist in the mount
    And "README.md" in the mount contains "hello"
    And "work" has 1 archive, from the live state to the checkpoint "clean"
    When I export the last archive
    Then the export has "work.txt" containing "agent work"
    And the export has "work.txt" with the mode 664
    And the export has "README.md" containing "hello changed"
    And the export has "src/main.go" containing "package main"
    When I restore the last archive
    Then "work.txt" in the mount contains "agent work"
    And "README.md" in the mount contains "hello changed"
    And the base is unchanged

  Scenario: Prune old checkpoints without losing files
    When I write "1" to "n.txt" in the mount
    And I create the checkpoint "c1" of "work"
    And I write "2" to "n.txt" in the mount
    And I create the checkpoint "c2" of "work"
    And I write "3" to "n.txt" in the mount
    And I create the checkpoint "c3" of "work"
    And I prune "work" keeping the last 1 checkpoint
    Then the checkpoints of "work" are "c3", oldest first
    And "n.txt" in the mount contains "3"
    And every checkpoint of "work" verifies
    When I remount the sandbox "work"
    Then "n.txt" in the mount contains "3"

  Scenario: Pruning gives back the copies no kept checkpoint shows
    When I write 256 KiB of random bytes to "big.bin" in the mount
    And I create the checkpoint "c1" of "work"
    And I write 256 KiB of random bytes to "big.bin" in the mount
    And I create the checkpoint "c2" of "work"
    And I write 256 KiB of random bytes to "big.bin" in the mount
    And I create the checkpoint "c3" of "work"
    And I prune "work" keeping the last 1 checkpoint
    Then the collection gave back 8 hidden blocks, 512 KiB
    And "big.bin" in the mount holds the bytes written last
    And every checkpoint of "work" verifies
    And fsck finds no problem
    When I remount the sandbox "work"
    Then "big.bin" in the mount holds the bytes written last

  Scenario: Fork a checkpoint into a new sandbox
    When I write "from work" to "shared.txt" in the mount
    And I create the checkpoint "fork-point" of "work"
    And I write "work went on" to "shared.txt" in the mount
    And I fork "copy" from the checkpoint "fork-point"
    And I mount the sandbox "copy" at the second mountpoint
    Then "shared.txt" in the second mount contains "from work"
    And "copy" stands on the layer of the checkpoint "fork-point"
    When I write "the fork's own" to "shared.txt" in the second mount
    Then "shared.txt" in the mount contains "work went on"
    And "shared.txt" in the second mount contains "the fork's own"
    When I roll "copy" back to the checkpoint "fork-point"
    Then "shared.txt" in the second mount contains "from work"
    And "shared.txt" in the mount contains "work went on"

  Scenario: Rolling back to another sandbox's checkpoint fails clearly
    Given a sandbox "other" over the base
    When I create the checkpoint "theirs" of "other"
    And I write "mine" to "mine.txt" in the mount
    And I try to roll "work" back to the checkpoint "theirs"
    Then the command fails with exit code 1
    And the error says "belongs to another sandbox"
    And the hint says "strata checkpoint list work"
    And "mine.txt" in the mount contains "mine"
    When I try to roll "work" back to the checkpoint "nope"
    Then the command fails with exit code 1
    And the error says "checkpoint nope: not found"

  Scenario: Keep a content written twice once
    When I write 256 KiB of random bytes to "big.bin" in the mount
    And I create the checkpoint "one" of "work"
    And I copy "big.bin" to "copy.bin" in the mount
    And I create the checkpoint "two" of "work"
    And I collect garbage with dedup
    Then the collection kept 4 blocks once and freed 256 KiB
    And "big.bin" and "copy.bin" in the mount hold the same bytes
    And every checkpoint of "work" verifies
    And fsck finds no problem
    When I remount the sandbox "work"
    Then "big.bin" and "copy.bin" in the mount hold the same bytes
