// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Test} from "forge-std/Test.sol";

import {Registry} from "../../../contracts/Registry.sol";
import {IRegistry} from "../../../contracts/interfaces/IRegistry.sol";
import {BaseTest} from "../Base.t.sol";

/// @notice Publishes and transfers by any of four actors under any of three names of either kind,
/// owner or not, naming no job or the one job the first actor paid for, and keeps a ghost copy of
/// what each publish that went through stored.
contract RegistryHandler is Test {
    Registry internal immutable registry;
    uint256 internal immutable paidJob;
    address[4] internal actors;
    string[3] internal names = ["acme/base", "acme/chat", "zoo/corpus"];

    /// @dev keccak of (kind, name) -> the hash of each version as published, in order.
    mapping(bytes32 key => bytes32[]) public ghostVersions;
    mapping(bytes32 key => address) public ghostOwner;
    /// @dev What went otherwise than the rules say: counted here, since a failed assertion inside a
    /// handler call is only a revert, which the campaign passes over.
    string[] public violations;

    constructor(Registry registry_, address jobUser, uint256 jobId) {
        registry = registry_;
        actors = [jobUser, makeAddr("b"), makeAddr("c"), makeAddr("d")];
        paidJob = jobId;
    }

    function key(IRegistry.Kind kind, string memory name) public pure returns (bytes32) {
        return keccak256(abi.encode(kind, name));
    }

    function ghostCount(bytes32 k) external view returns (uint256) {
        return ghostVersions[k].length;
    }

    function violationCount() external view returns (uint256) {
        return violations.length;
    }

    function nameAt(uint256 i) external view returns (string memory) {
        return names[i];
    }

    function publish(uint8 actor, uint8 name, bool dataset, uint32 parentVersion, bool namesJob) external {
        IRegistry.Kind kind = dataset ? IRegistry.Kind.Dataset : IRegistry.Kind.Model;
        address who = actors[actor % 4];
        string memory n = names[name % 3];
        bytes32 k = key(kind, n);
        uint256 count = ghostVersions[k].length;
        parentVersion = uint32(bound(parentVersion, 0, count)); // an existing one of its own, or none
        IRegistry.Publication memory p = IRegistry.Publication({
            cid: "QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEN",
            license: "MIT",
            metadataCid: "",
            parentName: parentVersion == 0 ? "" : n,
            parentVersion: parentVersion,
            jobId: namesJob ? paidJob : 0
        });
        bool mayPublish = (ghostOwner[k] == address(0) || ghostOwner[k] == who) && (!namesJob || who == actors[0]);
        vm.prank(who);
        try registry.publish(kind, n, p) returns (uint32 number) {
            if (!mayPublish) violations.push("a non-owner published, or claimed a job it did not pay for");
            if (number != count + 1) violations.push("a version number was skipped or reused");
            ghostOwner[k] = who;
            ghostVersions[k].push(keccak256(abi.encode(registry.version(kind, n, number))));
        } catch {
            if (mayPublish) violations.push("an owner could not publish");
        }
    }

    function transfer(uint8 actor, uint8 name, bool dataset, uint8 to) external {
        IRegistry.Kind kind = dataset ? IRegistry.Kind.Dataset : IRegistry.Kind.Model;
        address who = actors[actor % 4];
        string memory n = names[name % 3];
        bytes32 k = key(kind, n);
        vm.prank(who);
        try registry.transferName(kind, n, actors[to % 4]) {
            if (ghostOwner[k] != who) violations.push("a non-owner transferred");
            ghostOwner[k] = actors[to % 4];
        } catch {
            if (ghostOwner[k] == who) violations.push("an owner could not transfer");
        }
    }
}

/// @dev The CI profile runs the ledger's invariants at 256 x 128; these read every version of every
/// name after each call, and the registry holds no money: the default depth is enough here.
/// forge-config: ci.invariant.runs = 64
/// forge-config: ci.invariant.depth = 64
contract RegistryInvariantTest is BaseTest {
    Registry internal registry;
    RegistryHandler internal handler;

    function setUp() public override {
        super.setUp();
        registry = new Registry(market);
        handler = new RegistryHandler(registry, user, _createJob());
        targetContract(address(handler));
    }

    /// Every property below after every call, in one campaign (see the ledger suite).
    function invariant_theRegistryKeepsItsNames() public view {
        _versionsNeverChange();
        _onlyOwnersActAndOwnersAlwaysCan();
        _ownerIsFirstPublisherOrTransferee();
    }

    /// Versions are append-only: every version ever published reads back exactly as it was stored,
    /// and a name has exactly as many versions as were published under it.
    function _versionsNeverChange() internal view {
        for (uint256 d; d < 2; ++d) {
            IRegistry.Kind kind = IRegistry.Kind(d);
            for (uint256 i; i < 3; ++i) {
                string memory name = handler.nameAt(i);
                bytes32 k = handler.key(kind, name);
                uint32 count = registry.versionCount(kind, name);
                for (uint32 n = 1; n <= count; ++n) {
                    assertEq(
                        keccak256(abi.encode(registry.version(kind, name, n))),
                        handler.ghostVersions(k, n - 1),
                        "versionsNeverChange"
                    );
                }
                assertEq(count, handler.ghostCount(k), "versionsNeverChange");
            }
        }
    }

    /// Only a name's owner publishes under it or hands it on, and an owner always can.
    function _onlyOwnersActAndOwnersAlwaysCan() internal view {
        assertEq(handler.violationCount(), 0, "onlyOwnersActAndOwnersAlwaysCan");
    }

    /// A name's owner is its first publisher, or whom an owner handed it to; nobody else.
    function _ownerIsFirstPublisherOrTransferee() internal view {
        for (uint256 d; d < 2; ++d) {
            IRegistry.Kind kind = IRegistry.Kind(d);
            for (uint256 i; i < 3; ++i) {
                string memory name = handler.nameAt(i);
                assertEq(
                    registry.ownerOf(kind, name),
                    handler.ghostOwner(handler.key(kind, name)),
                    "ownerIsFirstPublisherOrTransferee"
                );
            }
        }
    }
}
