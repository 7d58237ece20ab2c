// SPDX-License-Identifier: MIT
pragma solidity 0.8.28;

import {Registry} from "../../contracts/Registry.sol";
import {IJobMarket} from "../../contracts/interfaces/IJobMarket.sol";
import {IRegistry} from "../../contracts/interfaces/IRegistry.sol";
import {BaseTest} from "./Base.t.sol";

contract RegistryTest is BaseTest {
    string internal constant NAME = "acme/llama-tiny";
    string internal constant CID = "bafybeigdyrzt5sfp7udm7hu76uh7y26nf3efuylqabf3oclgtqy55fbzdi";
    string internal constant CID2 = "QmZULkCELmmk5XNfCgTnCyFgAVxBRBXyDHGGMVoLFLiXEN";

    IRegistry.Kind internal constant MODEL = IRegistry.Kind.Model;
    IRegistry.Kind internal constant DATASET = IRegistry.Kind.Dataset;

    Registry internal registry;
    address internal alice = makeAddr("alice");
    address internal bob = makeAddr("bob");

    function setUp() public override {
        super.setUp();
        registry = new Registry(market);
    }

    function _publication(string memory cid) internal pure returns (IRegistry.Publication memory) {
        return IRegistry.Publication({
            cid: cid, license: "Apache-2.0", metadataCid: "", parentName: "", parentVersion: 0, jobId: 0
        });
    }

    function _publish(address who, string memory name, IRegistry.Publication memory p) internal returns (uint32) {
        vm.prank(who);
        return registry.publish(MODEL, name, p);
    }

    function test_publish_firstPublisherOwnsTheNameAtVersionOne() public {
        vm.expectEmit(address(registry));
        emit IRegistry.NameRegistered(MODEL, keccak256(bytes(NAME)), NAME, alice);
        vm.expectEmit(address(registry));
        emit IRegistry.VersionPublished(MODEL, keccak256(bytes(NAME)), 1, NAME, alice, _publication(CID));
        assertEq(_publish(alice, NAME, _publication(CID)), 1);

        assertEq(registry.ownerOf(MODEL, NAME), alice);
        assertEq(registry.versionCount(MODEL, NAME), 1);
        assertEq(registry.nameCount(MODEL), 1);
        assertEq(registry.nameAt(MODEL, 0), NAME);
        IRegistry.Version memory v = registry.version(MODEL, NAME, 1);
        assertEq(v.cid, CID);
        assertEq(v.license, "Apache-2.0");
        assertEq(v.publisher, alice);
        assertEq(v.publishedAt, block.timestamp);
    }

    function test_publish_appendsNumberedVersionsWithLineage() public {
        uint256 jobId = _createJob(); // paid for by `user`
        _publish(user, NAME, _publication(CID));
        IRegistry.Publication memory p = _publication(CID2);
        p.parentName = NAME;
        p.parentVersion = 1;
        p.jobId = jobId;
        p.metadataCid = CID;
        p.license = "MIT";
        assertEq(_publish(user, NAME, p), 2);

        (uint32 number, IRegistry.Version memory newest) = registry.latest(MODEL, NAME);
        assertEq(number, 2);
        assertEq(newest.cid, CID2);
        assertEq(newest.parentName, NAME);
        assertEq(newest.parentVersion, 1);
        assertEq(newest.jobId, jobId);
        assertEq(newest.metadataCid, CID);
        assertEq(registry.version(MODEL, NAME, 1).cid, CID); // the first is untouched
        assertEq(registry.nameCount(MODEL), 1);
    }

    function test_attack_aVersionCannotClaimAJobItsPublisherDidNotPayFor() public {
        uint256 jobId = _createJob(); // paid for by `user`
        IRegistry.Publication memory p = _publication(CID);
        p.jobId = jobId;
        vm.expectRevert(abi.encodeWithSelector(IRegistry.JobPaidByAnother.selector, jobId, alice, user));
        _publish(alice, NAME, p);
        p.jobId = jobId + 1;
        vm.expectRevert(abi.encodeWithSelector(IRegistry.UnknownJob.selector, jobId + 1));
        _publish(user, NAME, p);
        assertEq(registry.nameCount(MODEL), 0); // nothing registered by either try
    }

    function test_RevertWhen_deployedWithoutAMarket() public {
        vm.expectRevert(IRegistry.ZeroAddress.selector);
        new Registry(IJobMarket(address(0)));
    }

    function test_publish_modelsAndDatasetsAreSeparateNamespaces() public {
        _publish(alice, NAME, _publication(CID));
        vm.prank(bob);
        registry.publish(DATASET, NAME, _publication(CID2));
        assertEq(registry.ownerOf(DATASET, NAME), bob);
        assertEq(registry.ownerOf(MODEL, NAME), alice);
        assertEq(registry.nameCount(DATASET), 1);
    }

    function test_transferName_newOwnerPublishesOldOneCannot() public {
        _publish(alice, NAME, _publication(CID));
        vm.expectEmit(address(registry));
        emit IRegistry.NameTransferred(MODEL, NAME, alice, bob);
        vm.prank(alice);
        registry.transferName(MODEL, NAME, bob);
        assertEq(_publish(bob, NAME, _publication(CID2)), 2);
        assertEq(registry.version(MODEL, NAME, 2).publisher, bob);
        vm.expectRevert(abi.encodeWithSelector(IRegistry.NotNameOwner.selector, NAME, alice, bob));
        _publish(alice, NAME, _publication(CID));
    }

    function test_RevertWhen_publishToANameOwnedByAnother() public {
        _publish(alice, NAME, _publication(CID));
        vm.expectRevert(abi.encodeWithSelector(IRegistry.NotNameOwner.selector, NAME, bob, alice));
        _publish(bob, NAME, _publication(CID2));
    }

    function test_RevertWhen_transferByNonOwner() public {
        _publish(alice, NAME, _publication(CID));
        vm.expectRevert(abi.encodeWithSelector(IRegistry.NotNameOwner.selector, NAME, bob, alice));
        vm.prank(bob);
        registry.transferName(MODEL, NAME, bob);
    }

    function test_RevertWhen_transferToZeroAddressOrUnknownName() public {
        _publish(alice, NAME, _publication(CID));
        vm.expectRevert(IRegistry.ZeroAddress.selector);
        vm.prank(alice);
        registry.transferName(MODEL, NAME, address(0));
        vm.expectRevert(abi.encodeWithSelector(IRegistry.UnknownName.selector, "acme/other"));
        vm.prank(alice);
        registry.transferName(MODEL, "acme/other", bob);
    }

    function test_RevertWhen_nameIsNotOrgSlashName() public {
        string[9] memory bad = [
            "llama", "acme/", "/llama", "acme/llama/v2", "Acme/llama", "acme/lla ma", "acme/llama!", "a/", "acme\\llama"
        ];
        for (uint256 i; i < bad.length; ++i) {
            assertFalse(registry.isValidName(bad[i]));
            vm.expectRevert(abi.encodeWithSelector(IRegistry.InvalidName.selector, bad[i]));
            _publish(alice, bad[i], _publication(CID));
        }
        assertTrue(registry.isValidName("a/b"));
        assertTrue(registry.isValidName("zoo-labs/llama_3.2-1b"));
    }

    function test_RevertWhen_nameTooLong() public {
        bytes memory name = new bytes(registry.MAX_NAME_LENGTH() + 1);
        for (uint256 i; i < name.length; ++i) {
            name[i] = i == 4 ? bytes1("/") : bytes1("x");
        }
        vm.expectRevert(abi.encodeWithSelector(IRegistry.InvalidName.selector, string(name)));
        _publish(alice, string(name), _publication(CID));
        assembly {
            mstore(name, sub(mload(name), 1)) // the longest allowed
        }
        assertEq(_publish(alice, string(name), _publication(CID)), 1);
    }

    function test_RevertWhen_cidOrLicenseMalformed() public {
        IRegistry.Publication memory p = _publication("");
        vm.expectRevert(abi.encodeWithSelector(IRegistry.InvalidCid.selector, ""));
        _publish(alice, NAME, p);

        p = _publication("../../etc/passwd");
        vm.expectRevert(abi.encodeWithSelector(IRegistry.InvalidCid.selector, p.cid));
        _publish(alice, NAME, p);

        p = _publication(CID);
        p.metadataCid = "not a cid";
        vm.expectRevert(abi.encodeWithSelector(IRegistry.InvalidCid.selector, p.metadataCid));
        _publish(alice, NAME, p);

        p = _publication(CID);
        p.license = "";
        vm.expectRevert(abi.encodeWithSelector(IRegistry.InvalidLicense.selector, ""));
        _publish(alice, NAME, p);

        p.license = "MIT OR Apache 2.0";
        vm.expectRevert(abi.encodeWithSelector(IRegistry.InvalidLicense.selector, p.license));
        _publish(alice, NAME, p);
    }

    function test_RevertWhen_parentDoesNotExist() public {
        IRegistry.Publication memory p = _publication(CID);
        p.parentName = "acme/base";
        p.parentVersion = 1;
        vm.expectRevert(abi.encodeWithSelector(IRegistry.UnknownVersion.selector, "acme/base", 1));
        _publish(alice, NAME, p);

        p.parentVersion = 0;
        vm.expectRevert(abi.encodeWithSelector(IRegistry.InvalidParent.selector, "acme/base", 0));
        _publish(alice, NAME, p);

        // A dataset of the name does not make a model parent.
        vm.prank(bob);
        registry.publish(DATASET, "acme/base", _publication(CID));
        p.parentVersion = 1;
        vm.expectRevert(abi.encodeWithSelector(IRegistry.UnknownVersion.selector, "acme/base", 1));
        _publish(alice, NAME, p);
    }

    function test_RevertWhen_readingAMissingVersion() public {
        vm.expectRevert(abi.encodeWithSelector(IRegistry.UnknownName.selector, NAME));
        registry.latest(MODEL, NAME);
        vm.expectRevert(abi.encodeWithSelector(IRegistry.UnknownVersion.selector, NAME, 1));
        registry.version(MODEL, NAME, 1);
        _publish(alice, NAME, _publication(CID));
        vm.expectRevert(abi.encodeWithSelector(IRegistry.UnknownVersion.selector, NAME, 0));
        registry.version(MODEL, NAME, 0);
        vm.expectRevert(abi.encodeWithSelector(IRegistry.UnknownVersion.selector, NAME, 2));
        registry.version(MODEL, NAME, 2);
        vm.expectRevert(abi.encodeWithSelector(IRegistry.NameIndexOutOfRange.selector, 1, 1));
        registry.nameAt(MODEL, 1);
        assertEq(registry.ownerOf(MODEL, "acme/none"), address(0));
        assertEq(registry.versionCount(MODEL, "acme/none"), 0);
    }

    function testFuzz_publish_onlyOwnerAppends(address publisher, address other, uint8 versions) public {
        vm.assume(publisher != other && publisher != address(0));
        versions = uint8(bound(versions, 1, 12));
        for (uint32 i = 1; i <= versions; ++i) {
            assertEq(_publish(publisher, NAME, _publication(i % 2 == 0 ? CID : CID2)), i);
        }
        vm.expectRevert(abi.encodeWithSelector(IRegistry.NotNameOwner.selector, NAME, other, publisher));
        _publish(other, NAME, _publication(CID));
        assertEq(registry.versionCount(MODEL, NAME), versions);
        (uint32 number,) = registry.latest(MODEL, NAME);
        assertEq(number, versions);
    }

    function testFuzz_isValidName_acceptsOnlyTheCharset(bytes1 c) public view {
        bool allowed = (c >= "a" && c <= "z") || (c >= "0" && c <= "9") || c == "-" || c == "_" || c == ".";
        bytes memory name = bytes("acme/ab");
        name[6] = c;
        assertEq(registry.isValidName(string(name)), allowed);
    }
}
